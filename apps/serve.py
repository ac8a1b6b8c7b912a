"""``python -m bertology.apps.serve run DASHBOARD [streamlit options]``: Streamlit's own command
line (``python -m streamlit``), with the dashboard's page modules imported first.

Streamlit runs the dashboard script inside the server process, so a page's imports (pandas, plotly,
every page module: ~0.7 CPU seconds on a 2-core Xeon) would otherwise be paid by the first page a
researcher opens; imported here, while the server starts, they are ready by then, and the script
finds them in ``sys.modules``. They are imported before Streamlit starts, not beside it in a thread:
two threads importing streamlit's modules at once can meet Python's import-deadlock detection, and
the server did not come up once in CI that way. :func:`warm_up` then pays what each page's first
open would pay again (SciPy's t-quantiles, Plotly's validators, pyarrow's parquet modules). Nothing
else changes: the same options, server, exit
code and signals (``bertology dashboard`` and :func:`bertology.apps.screenshots.serve` start it).
"""

from __future__ import annotations

import io
import runpy
import sys


def _import_pages() -> None:
    """Import the pages' modules; an error is left for the page that needs them to show."""
    try:
        import bertology.apps.pages  # noqa: F401
    except Exception:  # noqa: BLE001 -- only a warm-up: the dashboard script imports them again
        pass


def warm_up() -> None:
    """Pay, while the server starts, what every first page would otherwise pay on its first open:
    SciPy's statistics (the pages' t-intervals, ~0.6 CPU s to import) and Plotly's lazily imported
    property validators (each trace type and layout property imports its validator module the first
    time it is set: ~0.1-0.3 s a page) and pyarrow's parquet modules. One small figure of each kind
    the pages draw, thrown away; raises what a failed import raises (:func:`main` goes on without)."""
    import pandas as pd
    import plotly.express as px
    import plotly.graph_objects as go
    import plotly.io as pio
    from plotly.subplots import make_subplots
    from scipy import stats

    stats.t.ppf(0.975, 3)
    frame = pd.DataFrame({"x": [0, 1], "y": [0.5, 0.7], "low": [0.4, 0.6], "task": ["a", "b"], "run": ["r", "r"]})
    frame = pd.read_parquet(io.BytesIO(frame.to_parquet()))  # pyarrow's parquet and dataset modules
    frame.pivot(index="x", columns="task", values="y")
    figures = [
        px.line(frame, x="x", y="y", color="task", facet_col="run", markers=True, error_y="low"),
        px.bar(frame, x="task", y="y", color="task", error_y="low", text="y", barmode="group"),
        px.imshow([[0.1, 0.2], [0.3, 0.4]], text_auto=".2f", color_continuous_scale="Blues", aspect="auto"),
    ]
    grid = make_subplots(rows=1, cols=2, subplot_titles=["a", "b"], shared_yaxes=True)
    grid.add_trace(
        go.Scatter(
            x=[0, 1],
            y=[1, 2],
            mode="lines+markers",
            name="a",
            line={"dash": "dot"},
            fill="tonexty",
            error_y={"type": "data", "array": [0.1, 0.1]},
            hovertemplate="%{y}",
            legendgroup="a",
            showlegend=False,
            marker={"size": 6, "symbol": "circle"},
            text=["a", "b"],
        ),
        row=1,
        col=1,
    )
    grid.add_trace(
        go.Bar(
            x=["a"],
            y=[1],
            error_y={"array": [0.1]},
            orientation="v",
            textposition="outside",
            marker_color="#1f77b4",
            texttemplate="%{y:.2f}",
        ),
        row=1,
        col=2,
    )
    grid.add_trace(
        go.Heatmap(
            z=[[1, 2]],
            x=["a", "b"],
            y=["c"],
            colorscale="Viridis",
            zmin=0,
            zmax=1,
            colorbar={"title": "v"},
            hovertemplate="%{z}",
            texttemplate="%{z}",
        ),
        row=1,
        col=2,
    )
    grid.add_hline(y=0.5, line_dash="dash", annotation_text="chance")
    grid.update_layout(
        height=300,
        margin={"t": 40},
        legend={"orientation": "h"},
        title={"text": "t", "subtitle": {"text": "s"}},
        hovermode="x unified",
        xaxis_title="x",
        yaxis_tickformat=".0%",
        barmode="group",
        template="plotly_white",
    )
    grid.update_xaxes(title_text="x", tickvals=[0, 1], tickfont={"size": 10}, range=[0, 1], tickangle=-45)
    grid.update_yaxes(title_text="y", autorange="reversed", showticklabels=True, matches=None)
    for figure in [*figures, grid]:
        pio.to_json(figure, validate=False)


def main() -> None:
    _import_pages()
    try:
        warm_up()
    except Exception:  # noqa: BLE001 -- only a warm-up: a page that needs these imports shows its own error
        pass
    sys.argv = ["streamlit", *sys.argv[1:]]
    runpy.run_module("streamlit", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
