"""Real browser: the dashboard served on localhost, driven by headless Chromium, one screenshot a page."""

from __future__ import annotations

import pytest

from bertology.apps import screenshots


@pytest.mark.slow
@pytest.mark.skipif(screenshots.find_chromium() is None, reason="Chromium not installed (apt-get install chromium)")
def test_every_page_renders_in_chromium(quickstart_results, tmp_path):
    shots = screenshots.take_screenshots(quickstart_results, tmp_path)
    assert [p.name for p in shots] == [f"{p.lower().replace(' ', '_')}.png" for p in screenshots.PAGES]
    blank = [p.name for p in shots if screenshots.is_blank(p)]
    assert not blank, f"pages rendered blank: {blank}"
