"""Streamlit pieces every page uses: run pickers, tables read with a message instead of a traceback,
a guard around each section, and deep-link parameters.

A broken result file never takes a page down: a missing or corrupt table is a warning naming the
run and the table, a malformed one an error for its section, and the page goes on.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeGuard, TypeVar

import pandas as pd
import streamlit as st

from bertology.apps.locations import (
    HIDDEN_HINT,
    clean,
    clean_json,
    default_run_index,
    describe,
    file_stamp,
    find_runs,
    how_to_fill,
    read_manifest,
    run_label,
    shown_root,
    split_runs,
)
from bertology.apps.tables import comparison_mismatches, old_numbering_note, paper_table, search_rows
from bertology.results import ResultError, read_extra, read_table

PROVENANCE = (
    "study",
    "run_id",
    "seed",
    "config",
    "model",
    "corpus",
    "wall_seconds",
    "git_commit",
    "packages",
    "numbering",
)


def load_table(run: Path, name: str) -> pd.DataFrame | None:
    """A run's table, or None with a warning when it is missing or corrupt. Read from disk once per
    version of the file (:func:`cached_table`), not on every rerun of the page."""
    path = run / f"{name}.parquet"
    try:
        return cached_table(str(run), name, file_stamp(path))
    except ResultError as exc:
        st.warning(clean(exc))
        return None


@st.cache_data(max_entries=512, show_spinner=False)
def cached_table(run: str, name: str, stamp: tuple[int, int] | None) -> pd.DataFrame:
    """:func:`bertology.results.read_table`, kept per ``stamp`` (the file's modification time and
    size: a rewritten table is read again); an error is raised, not kept. Each call returns a copy."""
    return read_table(Path(run), name)


def optional_table(run: Path, name: str) -> pd.DataFrame | None:
    """A table only some configurations write (MDL, L0 gates, translations, dependencies...): None,
    silently, when the run has no such file; a corrupt one still gets its warning."""
    return load_table(run, name) if (run / f"{name}.parquet").is_file() else None


def load_extra(run: Path, name: str) -> Any:
    """A run's JSON extra (``<name>.json``), or None with a note when it is missing or corrupt."""
    try:
        return read_extra(run, name)
    except ResultError as exc:
        st.info(clean(exc))
        return None


def has_columns_or_explain(
    df: pd.DataFrame | None, columns: list[str], what: str, run: Path | None = None
) -> TypeGuard[pd.DataFrame]:
    """True when the table is there, has ``columns`` and rows (for the type checker: ``df`` is then a
    DataFrame). Otherwise False, and the page says
    why (a warning for missing columns, a note for an empty table), naming run and table; for a
    missing table (None) the reader has already said so."""
    if df is None:
        return False
    where = f"{run_label(run)}: " if run is not None else ""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        st.warning(f"{where}{what}: table lacks columns {missing}")
        return False
    if df.empty:
        st.info(f"{where}{what}: the table is empty")
        return False
    return True


@contextmanager
def guard(what: str, run: Path | None = None) -> Iterator[None]:
    """Show an error for one section of one run (a malformed table) and go on with the page."""
    try:
        yield
    except Exception as exc:  # a broken result file must not take the page down
        where = f"{run_label(run)}: " if run is not None else ""
        st.error(f"{where}cannot show {what}: {type(exc).__name__}: {clean(exc)}")


_T = TypeVar("_T")


def chosen(value: _T | None) -> _T:
    """A select box's or radio's choice: over options that are not empty Streamlit always has one
    (its types say ``| None`` for the empty case, which the pages never draw)."""
    if value is None:
        raise ValueError("nothing to choose from")
    return value


def pick_word(container: Any, words: tuple[str, ...], key: str, label: str = "word to mask") -> int:
    """The index of a word of ``words`` picked in a select box of ``container`` (``st`` or a column),
    the second word to begin with (the first is often an article)."""
    return chosen(
        container.selectbox(
            label, range(len(words)), index=min(1, len(words) - 1), key=key, format_func=lambda w: f"{w}: {words[w]}"
        )
    )


def query(name: str) -> str | None:
    """A deep-link parameter of the URL (``?head=1-3``: layer 1, head 3), or None when absent or empty."""
    value = st.query_params.get(name)
    return value if isinstance(value, str) and value else None


def pick_run(study: str | None, key: str, label: str = "run") -> Path | None:
    """A run of ``study`` picked in a select box (newest first) with its provenance below; None,
    with a message saying how to make one, when there is none or its manifest is unreadable (and
    for a page over no study)."""
    if study is None:
        return None
    runs, hidden = split_runs(find_runs(study, include_unfinished=True))
    if hidden:
        st.caption(
            f"{len(hidden)} incomplete or unreadable `{study}` run(s) hidden (listed on the Runs page); {HIDDEN_HINT}"
        )
    if not runs:
        st.info(f"No complete `{study}` runs under {shown_root()}. {how_to_fill(study)}")
        return None
    linked = [i for i, r in enumerate(runs) if f"{study}/{r.name}" == query("run")]  # ?run=study/id (Sweeps)
    index = linked[0] if linked else default_run_index(runs)
    choice = st.selectbox(label, runs, key=key, format_func=describe, index=index)
    if choice is None:
        return None
    try:
        manifest = read_manifest(choice)
    except ResultError as exc:
        st.error(clean(exc))
        return None
    with st.expander("provenance"):
        st.json(clean_json({k: manifest.get(k) for k in PROVENANCE if k in manifest}))
    if note := old_numbering_note(manifest):
        st.warning(note)
    return choice


MISMATCH_WARNING = (
    "These two runs differ in more than the model or seed, so their numbers measure different "
    "things; compare them only with that in mind: "
)


def pick_other(study: str | None, run: Path, key: str) -> Path | None:
    """A second run of ``study`` to show beside ``run`` (None = no comparison); the deep link
    ``?compare=<study>/<run>`` preselects it."""
    if study is None:
        return None
    others = [r for r in find_runs(study) if r != run]
    if not others:
        return None
    options: list[Path | None] = [None, *others]
    wanted = query("compare")
    index = next((k for k, r in enumerate(options) if r is not None and run_label(r) == wanted), 0)
    choice = st.selectbox(
        "compare with",
        options,
        index=index,
        key=key,
        format_func=lambda r: "nothing (one run)" if r is None else describe(r),
    )
    if choice is not None:
        try:
            mismatches = comparison_mismatches(read_manifest(run), read_manifest(choice))
        except ResultError as exc:
            st.error(clean(exc))
            return None
        if mismatches:
            st.warning(MISMATCH_WARNING + "; ".join(clean(m) for m in mismatches))
        if note := old_numbering_note(read_manifest(choice)):
            st.warning(note)
    return choice


def searchable_table(df: pd.DataFrame, key: str, what: str, shown: int | None = None, paper: bool = False) -> None:
    """A table with a search box above it (``tables.search_rows``: any text column contains the
    typed text, case-insensitive) and a line saying how many rows match; ``shown``: at most that
    many rows are drawn; ``paper``: drawn as a paper prints it (``tables.paper_table``)."""
    text = st.text_input(f"search {what}", key=key, placeholder="a word (any column)")
    found = search_rows(df, text)
    drawn = found if shown is None else found.head(shown)
    st.caption(
        f"{len(found)} of {len(df)} rows"
        + (" match the search" if text.strip() else "")
        + (f"; the first {len(drawn)} shown" if len(drawn) < len(found) else "")
    )
    st.dataframe(paper_table(drawn) if paper else drawn, width="stretch", hide_index=True)
