"""BERTology dashboard: browse study runs. Its study pages only read result files (parquet + JSON) —
they never load a model or compute what a study should have saved; the Live page is the one that
loads a model, to show any typed sentence (:mod:`bertology.apps.pages.live`).

Run with ``bertology dashboard`` (binds to 127.0.0.1) or
``streamlit run $(python -c "import bertology.apps as a; print(a.__path__[0])")/dashboard.py --server.address 127.0.0.1``.

The pages are the entries of :data:`bertology.apps.pages.PAGES`. Deep links (used by the
screenshot script and the browser tests): ``?page=Heads``, plus ``&compare=<study>/<run>`` (a
second run beside the first on the pages that compare runs: Probing, Heads, Embeddings),
``&head=<layer>-<head>`` (numbers from 1: the head whose detail the Heads page opens) and ``&step=<n>`` (the
checkpoint of the Pretraining page's head map); the Live page takes ``&model=<name or folder>`` and
``&text=<sentence>``.
"""

from __future__ import annotations

import streamlit as st

from bertology.apps.locations import shown_root
from bertology.apps.pages import PAGE_BY_KEY, PAGES
from bertology.apps.tables import measure_lines
from bertology.apps.ui import chosen
from bertology.numbering import STATEMENT

# Streamlit's toolbar (Deploy button, menu) is hidden by `--client.toolbarMode viewer`, which the
# CLI and the screenshot script pass; this keeps the chrome clean when the file is run directly.
CLEAN_CHROME = """<style>
[data-testid="stAppDeployButton"], [data-testid="stMainMenu"] {display: none !important;}
</style>"""


def dashboard() -> None:
    """The one Streamlit page: the sidebar's own menu of :data:`PAGES` and the page it picks."""
    st.html(CLEAN_CHROME)
    st.sidebar.title("BERTology")
    st.sidebar.caption(f"results: {shown_root()}")
    keys = [p.key for p in PAGES]
    requested = st.query_params.get("page")  # deep links: ?page=Heads (used by the screenshot script)
    index = keys.index(requested) if requested in keys else 0
    page = PAGE_BY_KEY[chosen(st.sidebar.radio("page", keys, index=index, key="page"))]
    st.header(page.title)
    st.caption(page.intro)
    if page.study is not None or page.key == "Live":  # the pages that show layers
        st.caption(STATEMENT)
    definitions = measure_lines(page.key)
    if definitions:
        with st.expander("what the measures on this page mean"):
            st.markdown("\n".join(f"- {line}" for line in definitions))
    page.render(page)


def main() -> None:
    st.set_page_config(page_title="BERTology workbench", layout="wide", menu_items={})
    # Streamlit turns a `pages/` folder beside the script into its own multipage navigation (a
    # sidebar link per module, each a blank page). Declaring the app's one page with st.navigation
    # makes Streamlit ignore that folder; the pages are chosen by the sidebar menu and ?page=<key>.
    st.navigation([st.Page(dashboard, title="BERTology workbench", default=True)], position="hidden").run()


main()
