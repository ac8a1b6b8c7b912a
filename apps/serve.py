"""``python -m bertology.apps.serve run DASHBOARD [streamlit options]``: Streamlit's own command
line (``python -m streamlit``), with the dashboard's page modules imported first.

Streamlit runs the dashboard script inside the server process, so a page's imports (pandas, plotly,
every page module: ~0.7 CPU seconds on a 2-core Xeon) would otherwise be paid by the first page a
researcher opens; imported here, while the server starts, they are ready by then, and the script
finds them in ``sys.modules``. They are imported before Streamlit starts, not beside it in a thread:
two threads importing streamlit's modules at once can meet Python's import-deadlock detection, and
the server did not come up once in CI that way. Nothing else changes: the same options, server, exit
code and signals (``bertology dashboard`` and :func:`bertology.apps.screenshots.serve` start it).
"""

from __future__ import annotations

import runpy
import sys


def _import_pages() -> None:
    """Import the pages' modules; an error is left for the page that needs them to show."""
    try:
        import bertology.apps.pages  # noqa: F401
    except Exception:  # noqa: BLE001 -- only a warm-up: the dashboard script imports them again
        pass


def main() -> None:
    _import_pages()
    sys.argv = ["streamlit", *sys.argv[1:]]
    runpy.run_module("streamlit", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
