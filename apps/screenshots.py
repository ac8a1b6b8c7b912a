"""Serve the dashboard on localhost and drive it with a real browser (Playwright + Debian's
Chromium): open each page, wait for its own content (its title and its charts or tables), check
that Streamlit raised nothing, and save a full-page screenshot.

Usage: ``python -m bertology.apps.screenshots RESULTS_ROOT OUT_DIR`` (defaults: ``results``,
``docs/screenshots``). Needs the ``playwright`` package (the ``test`` extra) and a Chromium
(``apt-get install chromium``); the browser is Chromium from the system, never a download. The
server binds to 127.0.0.1 only and is stopped at the end. The pages, and what each must show, are
the entries of :data:`bertology.apps.pages.PAGES`; they are addressed by deep links
(``?page=Heads&compare=head_types/<run>``), and where a study has two runs, the pages that compare
runs (Probing, Heads, Embeddings) are also shot with the second run beside the first
(``*_compare.png``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bertology.apps.pages import PAGE_BY_KEY, PAGES
from bertology.paths import dashboard_command

CHART = '[data-testid="stPlotlyChart"]'
TABLE = '[data-testid="stDataFrame"]'
COUNT = f"""() => [[...document.querySelectorAll('{CHART}')].filter(e => e.querySelector('.main-svg')).length,
                     document.querySelectorAll('{TABLE}').length]"""
EXCEPTION = '[data-testid="stException"]'
ERROR = '[data-testid="stAlertContentError"]'
RUNNING = '[data-testid^="stStatusWidgetRunning"]'


def find_chromium() -> str | None:
    """A Chromium from the system (``/usr/bin/chromium`` on Debian), or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def has_playwright() -> bool:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"dashboard did not answer at {url} within {timeout}s")


@contextlib.contextmanager
def serve(results: Path, port: int | None = None, timeout: float = 180) -> Iterator[str]:
    """Run the dashboard on ``results`` at 127.0.0.1; yields its base URL, stops it afterwards.
    Started from the results folder's parent so the pages show ``results`` as a relative path."""
    port = port or free_port()
    results = Path(results).resolve()
    env = dict(os.environ, BERTOLOGY_RESULTS=str(results))
    server = subprocess.Popen(
        dashboard_command(port),
        env=env,
        cwd=results.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for(f"http://127.0.0.1:{port}/_stcore/health", timeout)
        yield f"http://127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)  # its own session: the server and anything it started
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@dataclass
class PageReport:
    """What the browser saw on one page."""

    page: str
    url: str
    screenshot: Path | None
    charts: int
    tables: int
    exceptions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    text: str = ""  # the page's visible text (main area and sidebar)


def settle(tab, timeout_ms: int, polling: int | str = 250) -> None:
    """Wait until Streamlit has finished the script run: the app's script state is ``notRunning``
    (a page just loaded is ``initial`` until its first run ends: the 'Running...' status widget
    alone shows only after a delay, so a check right after a page load could pass too early), no
    'Running...' status, nothing stale;
    ``polling``: milliseconds between checks, or ``"raf"`` (every animation frame: what a timing wants)."""
    tab.wait_for_function(
        f"""() => {{
            const busy = document.querySelector('{RUNNING}');
            const stale = document.querySelector('[data-stale="true"]');
            const app = document.querySelector('[data-testid="stApp"]');
            const state = app ? app.getAttribute('data-test-script-state') : null;
            return !busy && !stale && (state === null || state === 'notRunning');
        }}""",
        timeout=timeout_ms,
        polling=polling,
    )


def open_page(
    tab,
    base: str,
    page: str,
    params: dict[str, str] | None = None,
    timeout_ms: int = 240_000,
    charts: int | None = None,
    tables: int | None = None,
    polling: int | str = 250,
) -> tuple[str, int, int]:
    """Open the page named ``page`` (its registry key) and wait for its own content: the title,
    ``charts`` Plotly charts and ``tables`` data frames (defaults: the entry's ``min_charts`` and
    ``min_tables``), then for the script run to finish. Returns ``(url, charts, tables)`` seen; a
    Playwright timeout means the content never came. ``polling``: as for :func:`settle` (a 250 ms
    poll adds up to a quarter second to a timed open; the dashboard benchmark polls every frame)."""
    entry = PAGE_BY_KEY[page]
    want_charts = entry.min_charts if charts is None else charts
    want_tables = entry.min_tables if tables is None else tables
    url = f"{base}/?{urllib.parse.urlencode({'page': page, **(params or {})})}"
    tab.goto(url, wait_until="domcontentloaded", timeout=timeout_ms)
    tab.locator('[data-testid="stHeading"]', has_text=entry.title).first.wait_for(timeout=timeout_ms)
    tab.wait_for_function(
        f"([c, t]) => {{ const [charts, tables] = ({COUNT})(); return charts >= c && tables >= t; }}",
        arg=[want_charts, want_tables],
        timeout=timeout_ms,
        polling=polling,
    )
    settle(tab, timeout_ms, polling)
    charts, tables = tab.evaluate(COUNT)
    return url, charts, tables


def page_problems(tab) -> tuple[list[str], list[str]]:
    """(Streamlit exceptions, error boxes) on the page, as text."""
    return (
        [t.strip() for t in tab.locator(EXCEPTION).all_inner_texts()],
        [t.strip() for t in tab.locator(ERROR).all_inner_texts()],
    )


def save(tab, target: Path, width: int) -> Path:
    """Full-page screenshot: the viewport is stretched to the app's content first (Streamlit
    scrolls inside its own container, so a plain full-page shot would cut the page)."""
    height = tab.evaluate("""() => {
        const block = document.querySelector('[data-testid="stMainBlockContainer"]') ||
                      document.querySelector('[data-testid="stAppViewContainer"]');
        return Math.ceil(block ? block.scrollHeight : document.body.scrollHeight);
    }""")
    tab.set_viewport_size({"width": width, "height": int(min(max(height + 120, 900), 8000))})
    settle(tab, 60_000)
    tab.screenshot(path=str(target), full_page=True)
    return target


def shot_name(page: str, suffix: str = "") -> str:
    return f"{page.lower().replace(' ', '_')}{suffix}.png"


def second_runs(results: Path) -> dict[str, str]:
    """Per page that compares runs (key), the ``study/run`` of a second run, where its study has two."""
    out = {}
    for page in PAGES:
        if not page.compare or page.study is None:
            continue
        runs = sorted(
            (p for p in (results / page.study).glob("*") if (p / "manifest.json").is_file()),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        if len(runs) >= 2:
            out[page.key] = f"{runs[1].parent.name}/{runs[1].name}"
    return out


@contextlib.contextmanager
def browser(chromium: str | None = None, timeout_ms: int = 240_000) -> Iterator:
    """A headless Chromium tab (Playwright driving the system's Chromium)."""
    from playwright.sync_api import sync_playwright

    chromium = chromium or find_chromium()
    if chromium is None:
        raise RuntimeError("no Chromium found: apt-get install chromium")
    with sync_playwright() as pw:
        engine = pw.chromium.launch(
            executable_path=chromium, headless=True, args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
        )
        try:
            context = engine.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=1)
            context.set_default_timeout(timeout_ms)  # a busy machine renders slowly: wait for content
            yield context.new_page()
        finally:
            engine.close()


def take_screenshots(
    results: Path,
    out: Path,
    pages: Sequence[str] | None = None,
    width: int = 1400,
    compare: bool = True,
    timeout_ms: int = 240_000,
) -> list[PageReport]:
    """Every page named in ``pages`` (registry keys; None: all, in registry order) and, with
    ``compare``, the two-run views, rendered and saved under ``out``."""
    pages = [p.key for p in PAGES] if pages is None else list(pages)
    results = Path(results)
    out.mkdir(parents=True, exist_ok=True)
    jobs: list[tuple[str, dict[str, str], str]] = [(page, {}, shot_name(page)) for page in pages]
    if compare:
        jobs += [
            (page, {"compare": run}, shot_name(page, "_compare"))
            for page, run in second_runs(results).items()
            if page in pages
        ]
    reports = []
    with serve(results) as base, browser() as tab:
        for page, params, name in jobs:
            tab.set_viewport_size({"width": width, "height": 1000})
            entry = PAGE_BY_KEY[page]
            want_charts = entry.compare_charts if params and entry.compare_charts is not None else entry.min_charts
            want_tables = None
            if entry.study is not None and not any((results / entry.study).glob("*/manifest.json")):
                want_charts = want_tables = 0  # no run of its study: the page says how to make one
            url, charts, tables = open_page(
                tab, base, page, params, timeout_ms=timeout_ms, charts=want_charts, tables=want_tables
            )
            exceptions, errors = page_problems(tab)
            reports.append(
                PageReport(
                    page,
                    url.replace(base, ""),
                    save(tab, out / name, width),
                    charts,
                    tables,
                    exceptions,
                    errors,
                    tab.inner_text("body"),
                )
            )
    return reports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="?", type=Path, default=Path("results"), help="results root")
    parser.add_argument("out", nargs="?", type=Path, default=Path("docs") / "screenshots", help="where the PNGs go")
    args = parser.parse_args()
    if not has_playwright():
        sys.exit("playwright is not installed: pip install 'bertology-workbench[test]' (or pip install playwright)")
    bad = []
    for report in take_screenshots(args.results, args.out):
        print(
            f"{report.screenshot}  ({report.page}{' ' + report.url if 'compare' in report.url else ''}: "
            f"{report.charts} charts, {report.tables} tables)"
        )
        if report.exceptions or report.errors:
            bad.append(f"{report.page}: {report.exceptions + report.errors}")
    if bad:
        sys.exit("pages with errors:\n" + "\n".join(bad))


if __name__ == "__main__":
    main()
