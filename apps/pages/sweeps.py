"""The Sweeps page: a sweep's cells (``bertology sweep run``) -- how many are complete, the failed
ones with their errors -- and a heatmap of a headline figure over two grid fields, one per value
of the other fields, each cell's run linked to its study's page."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from bertology import paths
from bertology.apps.figures import esc
from bertology.apps.locations import clean, results_root, shown_root
from bertology.apps.pages.page import Page
from bertology.apps.ui import chosen, query
from bertology.results import ResultError
from bertology.sweeps import read_sweep_tables

NO_AXIS = "(none)"


def sweeps_page(page: Page) -> None:
    names = find_sweeps(results_root())
    if not names:
        st.info(
            f"No sweeps under {shown_root()}/{paths.SWEEPS_FOLDER}. Run one with "
            "`bertology sweep run examples/sweep_tiny.yaml` (4 small edge-probing cells; about a minute on 2 cores)."
        )
        return
    wanted = query("sweep")
    name = st.selectbox("sweep", names, index=names.index(wanted) if wanted in names else 0, key="sweep_name")
    try:
        spec, cells, summary = read_sweep_tables(str(name), results_root())
    except (ResultError, OSError, ValueError) as exc:
        st.error(clean(exc))
        return
    axes = [k for k in (spec.get("grid") or {}) if k in cells.columns]
    complete = int((cells["status"] == "complete").sum())
    st.markdown(
        f"**{esc(spec.get('study', '?'))}** · {complete} of {len(cells)} cells complete"
        + (f" · {int((cells['status'] == 'failed').sum())} failed" if (cells["status"] == "failed").any() else "")
        + f" · grid: {', '.join(f'`{a}`' for a in axes)}"
    )
    failed = cells[cells["status"] == "failed"]
    if not failed.empty:
        with st.expander(f"{len(failed)} failed cell(s) and their errors", expanded=True):
            st.dataframe(failed[[*axes, "error"]].map(clean), width="stretch", hide_index=True)
    if summary.empty or "figure" not in summary.columns:
        st.info("No headline figures yet: no cell is complete, or this study has none the sweep reads.")
    else:
        heatmaps(summary, axes)
    st.subheader("cells")
    st.dataframe(
        cell_links(cells, axes, study_page(str(spec.get("study", "")))),
        width="stretch",
        hide_index=True,
        column_config={"open": st.column_config.LinkColumn("open", display_text="open run")},
    )


def heatmaps(summary: pd.DataFrame, axes: list[str]) -> None:
    """The figure and item picked, two grid fields as the heatmap's axes, one heatmap per value of
    the other fields."""
    left, middle = st.columns(2)
    figures = list(dict.fromkeys(summary["figure"]))  # the study's headline figure first (bertology.sweeps.headline)
    figure = chosen(left.selectbox("figure", figures, key="sweep_figure"))
    rows = summary[summary["figure"] == figure]
    items = sorted(rows["item"].astype(str).unique())
    item = middle.selectbox("item", items, key="sweep_item") if len(items) > 1 else (items[0] if items else "")
    rows = rows[rows["item"].astype(str) == item]
    x_col, y_col = st.columns(2)
    x: str = chosen(x_col.selectbox("across (x)", axes, index=0, key="sweep_x"))
    others = [a for a in axes if a != x]
    y: str = chosen(y_col.selectbox("down (y)", [*others, NO_AXIS] if others else [NO_AXIS], index=0, key="sweep_y"))
    y_axis = None if y == NO_AXIS else y
    for label, part in facets(rows, [a for a in axes if a not in (x, y_axis)]):
        title = f"{figure} · {item}" + (f" · {label}" if label else "")
        st.plotly_chart(sweep_heatmap(part, x, y_axis, title), width="stretch")


# --------------------------------------------------------------------------- data shaping


def find_sweeps(root: Path) -> list[str]:
    """The sweeps under ``<root>/sweeps`` that wrote a cells table, by name."""
    folder = root / paths.SWEEPS_FOLDER
    return sorted(p.name for p in folder.glob("*") if (p / "cells.parquet").is_file()) if folder.is_dir() else []


def facets(summary: pd.DataFrame, rest: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """``(label, rows)`` per combination of the values of the ``rest`` grid fields (``model=a, seed=0``),
    in the order of the table; one ``("", summary)`` when there is no other field."""
    if not rest:
        return [("", summary)]
    values = [list(dict.fromkeys(summary[a])) for a in rest]
    out = []
    for combo in itertools.product(*values):
        mask = pd.Series(True, index=summary.index)
        for axis, value in zip(rest, combo, strict=True):
            mask &= summary[axis] == value
        if mask.any():
            out.append((", ".join(f"{a}={v}" for a, v in zip(rest, combo, strict=True)), summary[mask]))
    return out


def _interval(row: pd.Series) -> str:
    low, high = row.get("low"), row.get("high")
    if low is None or high is None or (isinstance(low, float) and math.isnan(low)) or math.isnan(float(high)):
        return "no interval"
    return f"[{low:.3f}, {high:.3f}]"


def sweep_heatmap(rows: pd.DataFrame, x: str, y: str | None, title: str) -> go.Figure:
    """Heatmap of ``value`` with ``x`` across and ``y`` down (one row when None), each cell's value
    written in it and its interval and run in the hover. ``rows``: one row per cell of the summary
    table (grid fields, ``run``, ``value``, ``low``, ``high``) for one figure and item."""
    xs = [str(v) for v in dict.fromkeys(rows[x])]
    ys = [str(v) for v in dict.fromkeys(rows[y])] if y else [""]
    z: list[list[float | None]] = [[None] * len(xs) for _ in ys]
    hover: list[list[str]] = [[""] * len(xs) for _ in ys]
    for _, r in rows.iterrows():
        i = ys.index(str(r[y])) if y else 0
        j = xs.index(str(r[x]))
        z[i][j] = float(r["value"])
        hover[i][j] = f"{esc(x)}={esc(r[x])}" + (f"<br>{esc(y)}={esc(r[y])}" if y else "")
        hover[i][j] += f"<br>{r['value']:.3f} {_interval(r)}<br>{esc(r['run'])}"
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[esc(v) for v in xs],
            y=[esc(v) for v in ys],
            text=[[f"{v:.3f}" if v is not None else "" for v in row] for row in z],
            texttemplate="%{text}",
            hovertext=hover,
            hoverinfo="text",
            colorscale="Viridis",
        )
    )
    fig.update_layout(
        title=esc(title),
        xaxis_title=esc(x),
        yaxis_title=esc(y) if y else "",
        xaxis_type="category",
        yaxis_type="category",
        height=180 + 40 * len(ys),
    )
    return fig


def study_page(study: str) -> str | None:
    """The key of the page that shows ``study``'s runs (None: no page does)."""
    from bertology.apps.pages import PAGES  # the registry imports this module

    return next((p.key for p in PAGES if p.study == study), None)


def cell_links(cells: pd.DataFrame, axes: list[str], page_key: str | None) -> pd.DataFrame:
    """The cells table as shown: grid fields, status, seconds, run, and ``open``: a deep link to the
    run on its study's page (``?page=Probing&run=edge_probing/<id>``; the Runs page where the study
    has none), for complete cells."""
    from urllib.parse import quote

    shown = cells[[*axes, "status", "seconds", "run"]].copy()

    def link(row: Any) -> str | None:
        if row["status"] != "complete":
            return None
        return f"?page={quote(page_key or 'Runs')}&run={quote(str(row['run']))}"

    shown["open"] = [link(r) for _, r in shown.iterrows()]
    return shown


# --------------------------------------------------------------------------- the registry entry

PAGE = Page(
    key="Sweeps",
    title="Sweeps: a grid of study runs",
    intro="One sweep (`bertology sweep run SWEEP.yaml`): each cell an ordinary study run over one "
    "combination of models, config values and seeds; a headline figure of each cell's study as a "
    "heatmap over two grid fields, one per value of the others, and each cell's run a click away.",
    render=sweeps_page,
)
