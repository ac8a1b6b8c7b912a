"""The Alignment page: P@k of a rotation between two embedding spaces, its translations and the
words that move most."""

from __future__ import annotations

import streamlit as st

from bertology.apps.pages.page import Page
from bertology.apps.ui import load_table, optional_table, pick_run, searchable_table

TRANSLATIONS_SHOWN = 300  # rows of the translations table on the page


def alignment_page(page: Page) -> None:
    run = pick_run(page.study, "align_run")
    if run is None:
        return
    precision = load_table(run, "precision")
    if precision is not None:
        st.subheader("P@k on held-out dictionary")
        st.dataframe(precision, width="stretch")
    translations = optional_table(run, "translations")
    if translations is not None:
        st.subheader("Translations")
        searchable_table(translations, "align_translation_search", "translations", shown=TRANSLATIONS_SHOWN)
    moved = optional_table(run, "most_moved")
    if moved is not None:
        st.subheader("Words that move most between the two spaces")
        searchable_table(moved, "align_moved_search", "moved words")


# --------------------------------------------------------------------------- the registry entry

PAGE = Page(
    key="Alignment",
    title="Rotation alignment (Procrustes, self-learning, CSLS)",
    intro="Two embedding spaces mapped onto each other by a rotation learnt from a seed dictionary, "
    "scored by translation retrieval (P@k, CSLS). Mikolov et al. 2013; Conneau et al. 2018; "
    "Artetxe et al. 2017.",
    render=alignment_page,
    study="alignment",
    main_table="precision",
    min_tables=1,
)
