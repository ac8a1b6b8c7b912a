"""The Compare runs page: the main table of two runs of one study side by side (each page over one
study names its main table in its registry entry), what makes them incomparable, and for edge
probing the paired difference of their best layers."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from bertology.apps import figures, tables
from bertology.apps.locations import clean, describe, find_runs, model_name, run_label
from bertology.apps.pages.page import Page
from bertology.apps.pages.probing import paired_difference
from bertology.apps.pages.pruning import metric_table_on_own_scale, pruning_scale
from bertology.apps.ui import MISMATCH_WARNING, guard, load_table
from bertology.results import ResultError, read_manifest


def compare_page(page: Page) -> None:
    from bertology.apps.pages import main_tables  # the registry, which imports this module

    tables_of = main_tables()
    studies = sorted({p.parent.name for p in find_runs()} & set(tables_of))
    if not studies:
        st.info("No runs to compare yet.")
        return
    study = st.selectbox("study", studies)
    if study is None:  # (a select box over a non-empty list always has a choice)
        return
    runs = find_runs(study)
    if len(runs) < 2:
        st.info(f"Only one `{study}` run: run the study again with another model, seed or config to compare.")
    c1, c2 = st.columns(2)
    a = c1.selectbox("run A", runs, index=0, format_func=describe)
    b = c2.selectbox("run B", runs, index=min(1, len(runs) - 1), format_func=describe)
    if a is None or b is None:
        return
    table = tables_of[study]
    try:
        mismatches = tables.comparison_mismatches(read_manifest(a), read_manifest(b))
    except ResultError:
        mismatches = []  # the side that cannot be read says so below
    if mismatches:
        st.warning(MISMATCH_WARNING + "; ".join(clean(m) for m in mismatches))
    frames = {}
    for side, col, run in (("A", c1, a), ("B", c2, b)):
        with col, guard(f"table {table}", run):
            frames[side] = df = load_table(run, table)
            try:
                m = read_manifest(run)
                st.caption(f"model: {model_name(m) or (m.get('config') or {}).get('model')} · seed {m.get('seed')}")
            except ResultError as exc:
                st.error(clean(exc))
            if df is not None and study == "edge_probing" and {"task", "layer", "value", "metric"} <= set(df.columns):
                means = tables.layer_means(accuracy_per_layer(df))
                st.plotly_chart(
                    figures.line_with_band(means, "layer", "task", run_label(run), "accuracy (test)"),
                    width="stretch",
                    key=f"cmp-{side}-{run_label(run)}",
                )  # A and B may be one run
    if frames.get("A") is not None and frames.get("B") is not None:
        with guard(f"the comparison of table {table}", a):
            reference = st.radio("difference against", ["A", "B"], horizontal=True, key="cmp_reference")
            st.subheader(f"`{table}`: A and B side by side, means over seeds")
            both = side_by_side(own_scale(frames["A"]), own_scale(frames["B"]), reference or "A", table)
            st.caption(
                f"Δ = {'B − A' if reference == 'A' else 'A − B'} (the other run minus the reference run {reference})."
            )
            st.dataframe(tables.paper_table(both), width="stretch", hide_index=True)
    if study == "edge_probing" and a != b:
        paired_difference(a, b)


# --------------------------------------------------------------------------- data shaping


def accuracy_per_layer(scores: pd.DataFrame) -> pd.DataFrame:
    """The rows of a ``layer_scores`` table a two-run comparison draws: accuracy where the table has
    it (else every metric) and per-layer probes where it has a ``mode`` column with them."""
    part = scores[scores["metric"] == "accuracy"] if "accuracy" in set(scores["metric"]) else scores
    if "mode" in part.columns:
        part = part[part["mode"] == "per_layer"] if "per_layer" in set(part["mode"]) else part
    return part


# Tables where the rule of :func:`side_by_side` would guess wrong: their key, measured and text
# columns (a head's type is text, shown for each run).
LAYOUTS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "head_types": (
        ("layer", "head"),
        ("positional_share", "special_share", "entropy_norm", "syntactic_gain"),
        ("type",),
    )
}
# Columns that say how a run was made, or notes, rather than which row it is or what it measured.
NOT_KEYS = frozenset({"seed", "model", "run", "run_id", "interval", "comparison", "small_sample", "significant"})
NOT_KEYS |= frozenset({"selected_on", "reported_on", "licence", "types", "seconds", "pruned"})
FLOAT_KEYS = frozenset({"share_removed", "tolerance", "lam"})
SPREAD_ENDINGS = ("_low", "_high", "_min", "_max", "low", "high", "sd", "ci95", "p_value")


def own_scale(table: pd.DataFrame) -> pd.DataFrame:
    """A main table on its metric's own scale: pruning curves of an MLM loss as the loss (the
    analysis stores minus the loss), any other table as it is."""
    if {"method", "share_removed", "value", "metric"} <= set(table.columns) and len(table):
        return metric_table_on_own_scale(table, pruning_scale(table)[0])
    return table


def value_columns(df: pd.DataFrame) -> list[str]:
    """The measured columns of a main table: numbers that are not a row's key (:data:`FLOAT_KEYS`),
    a note (:data:`NOT_KEYS`), an interval's end or spread, or a count."""
    return [
        c
        for c in df.columns
        if pd.api.types.is_float_dtype(df[c])
        and c not in FLOAT_KEYS | NOT_KEYS
        and not str(c).endswith(SPREAD_ENDINGS)
        and not tables.is_count(str(c))
    ]


def key_columns(df: pd.DataFrame, values: list[str]) -> list[str]:
    """The columns that tell a main table's rows apart (task, layer, metric, mode...): the rest,
    less :data:`NOT_KEYS`, counts, intervals' ends and spreads."""
    return [
        c
        for c in df.columns
        if c not in values
        and c not in NOT_KEYS
        and not tables.is_count(str(c))
        and not str(c).endswith(SPREAD_ENDINGS)
        and not (pd.api.types.is_float_dtype(df[c]) and c not in FLOAT_KEYS)
    ]


def table_layout(table_a: pd.DataFrame, table_b: pd.DataFrame, name: str | None = None) -> tuple[list, list, list]:
    """``(keys, values, texts)`` of two runs' main table ``name``: :data:`LAYOUTS` where it names
    the table, else :func:`key_columns` and :func:`value_columns`; only columns both tables have."""
    shared = [c for c in table_a.columns if c in set(table_b.columns)]
    if name in LAYOUTS:
        return tuple([c for c in part if c in shared] for part in LAYOUTS[name])  # type: ignore[return-value]
    values = [c for c in value_columns(table_a) if c in set(value_columns(table_b))]
    return key_columns(table_a[shared], values), values, []


def side_by_side(
    table_a: pd.DataFrame, table_b: pd.DataFrame, reference: str = "A", name: str | None = None
) -> pd.DataFrame:
    """Two runs' main table ``name`` on one row per key (means over seeds): for each measured column
    ``v`` (:func:`table_layout`) ``"A: v"``, ``"B: v"`` and ``"Δ v"`` = the other run minus the
    ``reference`` (``"A"`` or ``"B"``), and each text column as ``"A: c"``, ``"B: c"``. Rows one run
    lacks have its columns empty."""
    keys, values, texts = table_layout(table_a, table_b, name)
    if not values and not texts:  # nothing measured in both (e.g. an empty table): nothing to put side by side
        return pd.DataFrame(columns=keys)
    sides = []
    for side, table in (("A", table_a), ("B", table_b)):
        part = table[keys + values + texts].copy()
        for k in keys:  # float keys (shares) compared at 6 decimals, lists and other objects as text
            part[k] = part[k].round(6) if pd.api.types.is_float_dtype(part[k]) else part[k]
            part[k] = part[k].astype(str) if part[k].dtype == object else part[k]
        agg = {v: "mean" for v in values} | {t: "first" for t in texts}
        merged = (
            part.groupby(keys, sort=False, dropna=False).agg(agg).reset_index() if keys else part.agg(agg).to_frame().T
        )
        merged[f"order {side}"] = range(len(merged))  # rows in the order the tables give them, A's first
        sides.append(merged.rename(columns={c: f"{side}: {c}" for c in values + texts}))
    out = sides[0].merge(sides[1], on=keys, how="outer") if keys else pd.concat(sides, axis=1)
    out = out.sort_values(["order A", "order B"], na_position="last", kind="stable").reset_index(drop=True)
    other = "B" if reference == "A" else "A"
    for v in values:
        out[f"Δ {v}"] = out[f"{other}: {v}"] - out[f"{reference}: {v}"]
    order = keys + [f"{side}: {t}" for t in texts for side in ("A", "B")]
    return out[order + [c for v in values for c in (f"A: {v}", f"B: {v}", f"Δ {v}")]]


# --------------------------------------------------------------------------- the registry entry

PAGE = Page(
    key="Compare runs",
    title="Compare two runs",
    intro="The main table of two runs of one study side by side (another model, seed or config), with "
    "the difference of each measure against the run you choose as reference.",
    render=compare_page,
    min_tables=1,  # the two runs side by side in one table
)
