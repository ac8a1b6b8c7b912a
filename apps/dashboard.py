"""BERTology dashboard: browse study runs. It only reads result files (parquet + JSON) — it never
loads a model or computes what a study should have saved.

Run with ``bertology dashboard`` (binds to 127.0.0.1) or
``streamlit run $(python -c "import bertology.apps as a; print(a.__path__[0])")/dashboard.py --server.address 127.0.0.1``.

Deep links (used by the screenshot script and the browser tests): ``?page=Heads``, plus
``&compare=<study>/<run>`` (a second run beside the first on the Probing, Heads and Embeddings
pages), ``&head=<layer>-<head>`` (the head whose detail the Heads page opens) and ``&step=<n>``
(the checkpoint of the Pretraining page's head map).
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from bertology.apps import figures
from bertology.apps.figures import esc
from bertology.apps.pages import INTROS, PAGE_STUDY, PAGES, TITLES  # noqa: F401 (PAGE_STUDY: used by tests)
from bertology import paths
from bertology.results import ResultError, mean_ci, read_extra, read_manifest, read_table


def results_root() -> Path:
    return Path(os.environ.get("BERTOLOGY_RESULTS", Path.cwd() / "results"))


def shown_root() -> str:
    """The results folder as the page shows it: relative to the working folder, or just its name
    (never an absolute machine path)."""
    root = results_root().resolve()
    try:
        return str(root.relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return root.name


ABSOLUTE_PATH = re.compile(r"(?<![\w.~$:/])(/[^\s/\"',:;()\[\]]+){2,}")


def _tail(match: re.Match) -> str:
    parts = match.group(0).strip("/").split("/")
    return ".../" + "/".join(parts[-2:]) if len(parts) > 2 else match.group(0)


def clean(text: Any) -> str:
    """A message or value as shown, with no absolute machine path: the results folder, the working
    folder, the workbench home and the user's home become relative names, and any other absolute
    path is cut to its last two parts (``.../folder/file``)."""
    text = str(text)
    root = results_root()
    named = [(root, shown_root()), (paths.home(), "$BERTOLOGY_HOME"), (Path.home(), "~")]
    for folder, name in named:
        for absolute in sorted({str(folder), str(folder.resolve())}, key=len, reverse=True):
            text = text.replace(absolute, name)
    for absolute in {str(Path.cwd()), str(Path.cwd().resolve())}:
        text = text.replace(absolute + os.sep, "")
    return ABSOLUTE_PATH.sub(_tail, text)


def clean_json(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    return clean(obj) if isinstance(obj, str) else obj


def find_runs(study: str | None = None) -> list[Path]:
    root = results_root()
    pattern = f"{study}/*" if study else "*/*"
    return sorted((p for p in root.glob(pattern) if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)


def run_label(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def model_name(manifest: dict[str, Any]) -> str | None:
    model = manifest.get("model")
    if isinstance(model, dict):
        return None if model.get("name") is None else str(model.get("name"))
    return None if model is None else str(model)


def describe(run: Path) -> str:
    """``study/run · model`` for a run picker (the model only when its manifest says)."""
    try:
        name = model_name(read_manifest(run))
    except ResultError:
        name = None
    return run_label(run) + (f" · {name}" if name else "")


def load_table(run: Path, name: str) -> pd.DataFrame | None:
    """A run's table, or None with a clear message when it is missing or corrupt."""
    try:
        return read_table(run, name)
    except ResultError as exc:
        st.warning(clean(exc))
        return None


def optional_table(run: Path, name: str) -> pd.DataFrame | None:
    """A table only some configurations write (MDL, L0 gates, translations...): None, silently, when
    the run has no such file; a corrupt one still gets its message."""
    return load_table(run, name) if (run / f"{name}.parquet").exists() else None


def load_extra(run: Path, name: str):
    try:
        return read_extra(run, name)
    except ResultError as exc:
        st.info(clean(exc))
        return None


@contextmanager
def guard(what: str, run: Path | None = None) -> Iterator[None]:
    """Show an error for one section of one run (a malformed table) and go on with the page."""
    try:
        yield
    except Exception as exc:  # a broken result file must not take the page down
        where = f"{run_label(run)}: " if run is not None else ""
        st.error(f"{where}cannot show {what}: {type(exc).__name__}: {clean(exc)}")


def query(name: str) -> str | None:
    value = st.query_params.get(name)
    return value if isinstance(value, str) and value else None


def pick_run(study: str, key: str, label: str = "run") -> Path | None:
    runs = find_runs(study)
    if not runs:
        st.info(f"No `{study}` runs under {shown_root()}. Run `bertology study run {study}` "
                f"(or `bertology study run quickstart`).")
        return None
    choice = st.selectbox(label, runs, key=key, format_func=describe)
    try:
        manifest = read_manifest(choice)
    except ResultError as exc:
        st.error(clean(exc))
        return None
    with st.expander("provenance"):
        st.json(clean_json({k: manifest.get(k) for k in ("study", "run_id", "seed", "config", "model", "corpus",
                                                         "wall_seconds", "git_commit", "packages") if k in manifest}))
    return choice


def pick_other(study: str, run: Path, key: str) -> Path | None:
    """A second run of ``study`` to show beside ``run`` (None = no comparison); the deep link
    ``?compare=<study>/<run>`` preselects it."""
    others = [r for r in find_runs(study) if r != run]
    if not others:
        return None
    options: list[Path | None] = [None, *others]
    wanted = query("compare")
    index = next((k for k, r in enumerate(options) if r is not None and run_label(r) == wanted), 0)
    choice = st.selectbox("compare with", options, index=index, key=key,
                          format_func=lambda r: "nothing (one run)" if r is None else describe(r))
    if choice is not None:
        try:
            read_manifest(choice)
        except ResultError as exc:
            st.error(clean(exc))
            return None
    return choice


def need(df: pd.DataFrame | None, columns: list[str], what: str, run: Path | None = None) -> bool:
    """True when the table is there, has ``columns`` and rows; else a message naming run and table."""
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


def line_with_band(df: pd.DataFrame, x: str, color: str, title: str, y_title: str) -> go.Figure:
    fig = go.Figure()
    palette = px.colors.qualitative.Plotly
    for k, (name, part) in enumerate(df.groupby(color)):
        part = part.sort_values(x)
        c = palette[k % len(palette)]
        fig.add_trace(go.Scatter(x=list(part[x]) + list(part[x])[::-1],
                                 y=list(part["mean"] + part["ci95"]) + list(part["mean"] - part["ci95"])[::-1],
                                 fill="toself", fillcolor=c, opacity=0.15, line=dict(width=0),
                                 hoverinfo="skip", showlegend=False))
        fig.add_trace(go.Scatter(x=part[x], y=part["mean"], mode="lines+markers", name=esc(name),
                                 line=dict(color=c)))
    fig.update_layout(title=esc(title), xaxis_title=x, yaxis_title=esc(y_title), height=420)
    return fig


def header(page: str) -> None:
    st.header(TITLES[page])
    st.caption(INTROS[page])


# --------------------------------------------------------------------------- pages

def page_runs() -> None:
    header("Runs")
    runs = find_runs()
    if not runs:
        st.info(f"No results under {shown_root()}. Create some with `bertology study run quickstart`.")
        return
    rows = []
    for r in runs:
        try:
            m = read_manifest(r)
            tables = m.get("tables")
            rows.append({"study": r.parent.name, "run": r.name, "seed": None if m.get("seed") is None else str(m.get("seed")),
                         "model": model_name(m),
                         "tables": ", ".join(map(str, tables)) if isinstance(tables, list) else clean(tables or ""),
                         "seconds": m.get("wall_seconds") if isinstance(m.get("wall_seconds"), (int, float)) else None,
                         "status": "complete"})
        except ResultError as exc:
            rows.append({"study": r.parent.name, "run": r.name, "status": f"unreadable: {clean(exc)}"})
    st.dataframe(pd.DataFrame(rows), width="stretch", hide_index=True)


def probe_part(scores: pd.DataFrame, metric: str | None, mode: str | None) -> pd.DataFrame:
    """Held-out, non-control rows of one metric and probe input."""
    if "split" in scores.columns:  # held-out test scores; dev was used for early stopping
        scores = scores[scores["split"] == "test"]
    if "control" in scores.columns:
        scores = scores[~scores["control"].astype(bool)]
    part = scores[scores["metric"] == metric]
    if mode is not None and "mode" in part.columns:
        part = part[part["mode"] == mode]
    return part


def page_probing() -> None:
    header("Probing")
    run = pick_run("edge_probing", "probe_run")
    if run is None:
        return
    other = pick_other("edge_probing", run, "probe_compare")
    scores = load_table(run, "layer_scores")
    if need(scores, ["task", "layer", "metric", "value", "seed"], "layer_scores", run):
        with guard("the layer curves", run):
            metrics = sorted(scores["metric"].astype(str).unique())
            metric = st.selectbox("metric", metrics, index=metrics.index("accuracy") if "accuracy" in metrics else 0)
            mode = None
            if "mode" in scores.columns:
                modes = sorted(scores["mode"].astype(str).unique())
                mode = st.selectbox("probe input", modes, index=modes.index("per_layer") if "per_layer" in modes else 0)
            part = probe_part(scores, metric, mode)
            if other is None:
                st.plotly_chart(line_with_band(mean_ci(part, ["task", "layer"]), "layer", "task",
                                               f"{metric} per layer (mean ± 95% CI over seeds)", metric), width="stretch")
            else:
                b = read_table(other, "layer_scores")
                both = pd.concat([mean_ci(part, ["task", "layer"]).assign(run=describe(run)),
                                  mean_ci(probe_part(b, metric, mode), ["task", "layer"]).assign(run=describe(other))])
                both["run"] = both["run"].map(esc)
                both["task"] = both["task"].map(esc)
                fig = px.line(both, x="layer", y="mean", error_y="ci95", color="run", facet_col="task", markers=True,
                              title=f"{metric} per layer, two runs (mean ± 95% CI over seeds)")
                fig.for_each_annotation(lambda a: a.update(text=a.text.split("=", 1)[-1]))
                fig.update_layout(height=420, legend=dict(orientation="h", y=-0.25))
                st.plotly_chart(fig, width="stretch")
    summary = load_table(run, "summary")
    if summary is not None:
        st.subheader("Expected layers (Table 1 style)")
        st.dataframe(summary, width="stretch")
    weights = optional_table(run, "mix_weights")
    if need(weights, ["task", "layer", "weight"], "mix_weights", run):
        with guard("the scalar-mix weights", run):
            fig = px.bar(weights.groupby(["task", "layer"], as_index=False)["weight"].mean()
                         .assign(task=lambda d: d["task"].map(esc)), x="layer", y="weight",
                         color="task", barmode="group", title="scalar-mix weights")
            st.plotly_chart(fig, width="stretch")
    controls = optional_table(run, "controls")
    if controls is not None:
        st.subheader("Control tasks (Hewitt & Liang 2019) and MDL (Voita & Titov 2020)")
        st.dataframe(controls, width="stretch")
    mdl = optional_table(run, "mdl")
    if mdl is not None:
        st.dataframe(mdl, width="stretch")


def page_combinations() -> None:
    header("Feature combinations")
    run = pick_run("feature_combinations", "combo_run")
    if run is None:
        return
    df = load_table(run, "combinations")
    if need(df, ["combination", "task", "metric", "value"], "combinations", run):
        with guard("the combinations", run):
            metric = st.selectbox("metric", sorted(df["metric"].unique()))
            part = mean_ci(df[df["metric"] == metric], ["task", "combination"])
            fig = px.bar(part.assign(task=part["task"].map(esc), combination=part["combination"].map(esc)),
                         x="combination", y="mean", error_y="ci95", color="task", barmode="group",
                         title=f"{esc(metric)} by feature combination")
            st.plotly_chart(fig, width="stretch")
            st.dataframe(part, width="stretch")


def head_types_table(run: Path) -> pd.DataFrame | None:
    """A run's ``head_types`` table, checked: integer layers and heads, one row per head."""
    types = load_table(run, "head_types")
    if not need(types, ["layer", "head", "type"], "head_types", run):
        return None
    types = types.assign(layer=pd.to_numeric(types["layer"], errors="raise").astype(int),
                         head=pd.to_numeric(types["head"], errors="raise").astype(int))
    duplicated = types.duplicated(["layer", "head"])
    if duplicated.any():
        first = types[duplicated].iloc[0]
        raise ResultError(f"head_types has {int(duplicated.sum())} repeated head(s), e.g. layer {first['layer']} "
                          f"head {first['head']}")
    return types


def default_head(types: pd.DataFrame) -> str:
    """The head the detail opens first: the clearest syntactic head, else the first positional one."""
    for kind, column in (("syntactic", "syntactic_gain"), ("positional", "positional_share")):
        part = types[types["type"] == kind]
        if len(part):
            row = part.sort_values(column, ascending=False).iloc[0] if column in part else part.iloc[0]
            return f"{int(row['layer'])}-{int(row['head'])}"
    row = types.sort_values(["layer", "head"]).iloc[0]
    return f"{int(row['layer'])}-{int(row['head'])}"


def clicked_head(state: Any) -> str | None:
    """``"layer-head"`` of the point a click selected on the head map, if any."""
    try:
        points = state["selection"]["points"]
    except (KeyError, TypeError):
        return None
    for p in points or []:
        if "x" in p and "y" in p:
            return f"{int(p['y'])}-{int(p['x'])}"
    return None


def page_heads() -> None:
    header("Heads")
    run = pick_run("head_types", "heads_run")
    if run is None:
        return
    other = pick_other("head_types", run, "heads_compare")
    types = None
    with guard("the head map", run):
        types = head_types_table(run)
    if types is not None:
        with guard("the head map", run):
            heads = [f"{int(l)}-{int(h)}" for l, h in types.sort_values(["layer", "head"])[["layer", "head"]].to_numpy()]
            pick_key = f"head_pick::{run_label(run)}"
            if st.session_state.get(pick_key) not in heads:
                wanted = query("head")
                st.session_state[pick_key] = wanted if wanted in heads else default_head(types)
            click = clicked_head(st.session_state.get("head_map"))
            if click in heads and click != st.session_state.get("head_last_click"):
                st.session_state["head_last_click"] = click
                st.session_state[pick_key] = click
            layer, head = map(int, st.session_state[pick_key].split("-"))
            title, subtitle = "head types" + (" (A)" if other is not None else ""), describe(run)
            if other is None:
                st.plotly_chart(figures.head_map(types, title, selected=(layer, head), subtitle=subtitle), width="stretch",
                                key="head_map", on_select="rerun", selection_mode="points")
            else:
                c1, c2 = st.columns(2)
                with c1:
                    st.plotly_chart(figures.head_map(types, title, selected=(layer, head), subtitle=subtitle), width="stretch",
                                    key="head_map", on_select="rerun", selection_mode="points")
                with c2, guard("the second head map", other):
                    types_b = head_types_table(other)
                    if types_b is not None:
                        st.plotly_chart(figures.head_map(types_b, "head types (B)", subtitle=describe(other)), width="stretch",
                                        key="head_map_b")
                        counts = pd.concat([types["type"].value_counts().rename("A"),
                                            types_b["type"].value_counts().rename("B")], axis=1).fillna(0).astype(int)
                        st.caption(f"heads per type: A = {describe(run)}, B = {describe(other)}")
                        st.dataframe(counts.rename_axis("type").reset_index(), hide_index=True)
            labels = types.set_index(types["layer"].astype(str) + "-" + types["head"].astype(str))["type"]
            st.selectbox("head (or click one on the map)", heads, key=pick_key,
                         format_func=lambda k: f"layer {k.split('-')[0]}, head {k.split('-')[1]} — {labels.get(k, '?')}")
            layer, head = map(int, st.session_state[pick_key].split("-"))
        head_detail(run, types, layer, head)
    probe = load_table(run, "attention_probe")
    if probe is not None:
        st.subheader("Attention-based dependency probe (Clark et al.)")
        st.dataframe(probe, width="stretch")


def head_detail(run: Path, types: pd.DataFrame, layer: int, head: int) -> None:
    """What one head does: its scores, where its attention peaks, the relations it tracks, and its
    attention on the run's example sentences (with a bertviz-style view of one)."""
    st.subheader(f"Layer {layer}, head {head}")
    with guard(f"the scores of layer {layer}, head {head}", run):
        row = types[(types["layer"] == layer) & (types["head"] == head)].iloc[0]
        facts = [f"type **{esc(row['type'])}**" + (f" (all: {esc(row['types'])})" if "types" in row and
                                                   str(row["types"]) not in ("", str(row["type"])) else "")]
        if "positional_offset" in row and pd.notna(row.get("positional_share")):
            facts.append(f"{row['positional_share']:.0%} of its argmaxes at offset {int(row['positional_offset']):+d}")
        if "entropy_norm" in row and pd.notna(row["entropy_norm"]):
            facts.append(f"normalised entropy {row['entropy_norm']:.2f}")
        if "special_share" in row and pd.notna(row["special_share"]):
            facts.append(f"{row['special_share']:.0%} of its attention on [CLS]/[SEP]")
        st.markdown(" · ".join(facts).replace("[", "\\[").replace("]", "\\]"))
    c1, c2 = st.columns(2)
    stats = load_table(run, "head_stats")
    with c1, guard("the offset histogram", run):
        if need(stats, ["layer", "head", "statistic", "value"], "head_stats", run):
            hist = figures.offset_histogram(stats, layer, head)
            if hist.empty:
                st.info("head_stats holds no offset counts for this head")
            else:
                st.plotly_chart(figures.offset_figure(hist, layer, head), width="stretch", key="offsets")
    deps = load_table(run, "head_dependency") if (run / "head_dependency.parquet").is_file() else None
    with c2, guard("the relations", run):
        if deps is not None and deps.empty:
            st.info("The corpus of this run has no dependencies: no relations to score.")
        elif need(deps, ["layer", "head", "relation", "direction", "n", "accuracy", "baseline_offset",
                         "baseline_accuracy", "gain"], "head_dependency", run):
            try:
                cfg = read_manifest(run).get("config")
                min_count = int(cfg.get("min_count", 20)) if isinstance(cfg, dict) else 20
            except (ResultError, TypeError, ValueError):
                min_count = 20
            rel = figures.relation_table(deps, layer, head, min_count=min_count)
            if rel.empty:
                st.info(f"No relation has {min_count} or more instances for this head.")
            else:
                st.plotly_chart(figures.relation_figure(rel, layer, head), width="stretch", key="relations")
                best = rel.iloc[0]
                st.caption(f"Best: {esc(best['relation'])} ({figures.DIRECTIONS.get(best['direction'], best['direction'])})"
                           f", accuracy {best['accuracy']:.2f} vs {best['baseline_accuracy']:.2f} for the best fixed "
                           f"offset ({int(best['baseline_offset']):+d}); n = {int(best['n'])}.".replace("_", "\\_"))
    examples = load_extra(run, "attention_examples")
    with guard("the attention examples", run):
        sents = examples.get("sentences") if isinstance(examples, dict) else None
        if sents:
            st.markdown("**Its attention on example sentences** (row = attending word, column = attended word)")
            st.plotly_chart(figures.attention_small_multiples(sents, layer, head), width="stretch", key="examples")
            st.markdown("**Head view of one sentence** (bertviz-style, drawn offline)")
            k = st.selectbox("sentence", range(len(sents)), format_func=lambda i: " ".join(sents[i]["words"])[:90],
                             key="head_sentence")
            words = sents[k]["words"]
            c3, c4 = st.columns(2)
            c3.plotly_chart(figures.head_view(words, sents[k]["attention"][layer][head],
                                              f"layer {layer}, head {head}"), width="stretch", key="head_view")
            c4.plotly_chart(figures.attention_heatmap(words, sents[k]["attention"][layer][head],
                                                      f"layer {layer}, head {head}"), width="stretch", key="heatmap")


def page_pruning() -> None:
    header("Pruning")
    run = pick_run("pruning", "prune_run")
    if run is None:
        return
    curves = load_table(run, "pruning_curves")
    if need(curves, ["method", "share_removed", "value"], "pruning_curves", run):
        with guard("the pruning curves", run):
            part = mean_ci(curves, ["method", "share_removed"])
            st.plotly_chart(line_with_band(part, "share_removed", "method", "metric vs share of heads removed",
                                           str(curves["metric"].iloc[0]) if "metric" in curves else "metric"),
                            width="stretch")
    imp = load_table(run, "importance")
    if need(imp, ["layer", "head", "importance"], "importance", run):
        with guard("the importance map", run):
            grid = imp.groupby(["layer", "head"])["importance"].mean().unstack()
            st.plotly_chart(px.imshow(grid, labels=dict(x="head", y="layer", color="importance"),
                                      title="head importance (normalised per layer)"), width="stretch")
    for name in ("pruning_cost", "l0_gates"):
        df = optional_table(run, name)
        if df is not None:
            st.subheader(name.replace("_", " "))
            st.dataframe(df, width="stretch")


def page_embeddings() -> None:
    header("Embeddings")
    run = pick_run("contextuality", "ctx_run")
    if run is None:
        return
    other = pick_other("contextuality", run, "ctx_compare")
    ctx = load_table(run, "contextuality")
    if need(ctx, ["layer", "metric"], "contextuality", run):
        with guard("the contextuality panels", run):
            if other is None:
                st.plotly_chart(figures.contextuality_multiples(ctx), width="stretch")
            else:
                b = read_table(other, "contextuality")
                both = pd.concat([ctx.assign(run=describe(run)), b.assign(run=describe(other))], ignore_index=True)
                st.plotly_chart(figures.contextuality_multiples(both, run_column="run"), width="stretch")
    clusters = load_table(run, "sense_clusters")
    if need(clusters, ["word", "x", "y"], "sense_clusters", run):
        with guard("the sense clusters", run):
            word = st.selectbox("polysemous word", sorted(clusters["word"].astype(str).unique()))
            part = clusters[clusters["word"].astype(str) == word]
            st.plotly_chart(figures.cluster_figure(part, word, part["layer"].iloc[0] if "layer" in part else None),
                            width="stretch")
    neighbours = optional_table(run, "neighbours")
    if neighbours is not None:
        st.subheader("Static vs contextual neighbours")
        st.dataframe(neighbours, width="stretch")


def page_alignment() -> None:
    header("Alignment")
    run = pick_run("alignment", "align_run")
    if run is None:
        return
    prec = load_table(run, "precision")
    if prec is not None:
        st.subheader("P@k on held-out dictionary")
        st.dataframe(prec, width="stretch")
    tr = optional_table(run, "translations")
    if tr is not None:
        st.subheader("Translations")
        st.dataframe(tr.head(300), width="stretch")
    moved = optional_table(run, "most_moved")
    if moved is not None:
        st.subheader("Words that move most between the two spaces")
        st.dataframe(moved, width="stretch")


def page_pretraining() -> None:
    header("Pretraining")
    run = pick_run("emergence", "pt_run")
    if run is None:
        return
    metrics = load_table(run, "training_metrics")
    if need(metrics, ["step", "metric", "value"], "training_metrics", run):
        with guard("the loss curves", run):
            loss = metrics[metrics["metric"].isin(["loss", "eval_loss"])]
            st.plotly_chart(px.line(loss, x="step", y="value", color="metric", markers=True,
                                    title="MLM loss (nats/token): training and held-out"), width="stretch")
            ppl = metrics[metrics["metric"] == "perplexity"]
            if len(ppl):
                st.plotly_chart(px.line(ppl, x="step", y="value", markers=True, title="held-out perplexity"),
                                width="stretch")
    st.subheader("Heads across checkpoints")
    by_step = load_table(run, "head_types_by_step")
    if need(by_step, ["step", "layer", "head", "type"], "head_types_by_step", run):
        with guard("the head maps by checkpoint", run):
            steps = sorted(int(s) for s in by_step["step"].unique())
            wanted = query("step")
            start = int(wanted) if wanted and wanted.lstrip("-").isdigit() and int(wanted) in steps else steps[-1]
            step = st.select_slider("checkpoint step (head map)", options=steps, value=start, key="pt_step")
            others = [s for s in steps if s != step]
            versus = st.selectbox("beside it, step", [None, *others], key="pt_versus",
                                  format_func=lambda s: "nothing" if s is None else f"step {s}")
            shown = [step] if versus is None else [step, versus]
            columns = st.columns(len(shown))
            for col, s in zip(columns, shown):
                part = by_step[by_step["step"] == s]
                col.plotly_chart(figures.head_map(part, f"head types at step {s}"), width="stretch", key=f"pt_map_{s}")
    counts = load_table(run, "head_counts")
    if need(counts, ["step", "type", "count"], "head_counts", run):
        with guard("the head counts", run):
            st.plotly_chart(figures.type_counts_figure(counts), width="stretch")
    st.subheader("Probe accuracy across checkpoints")
    probes = load_table(run, "probe_scores")
    if need(probes, ["step", "task", "layer", "value"], "probe_scores", run):
        with guard("the probe accuracy", run):
            st.plotly_chart(figures.probe_by_step(probes), width="stretch")
            best = probes.groupby(["step", "task", "layer"], as_index=False)["value"].mean() \
                .groupby(["step", "task"], as_index=False)["value"].max()
            st.plotly_chart(px.line(best.assign(task=best["task"].map(esc)), x="step", y="value", color="task",
                                    markers=True, title="best-layer probe accuracy across checkpoints"),
                            width="stretch")
    cloze = load_table(run, "cloze_predictions") if (run / "cloze_predictions.parquet").is_file() else None
    if cloze is not None and not cloze.empty and need(cloze, ["step", "text", "masked", "rank", "prediction",
                                                              "probability"], "cloze_predictions", run):
        with guard("the masked-word predictions", run):
            st.subheader("What the model predicts for a masked word")
            accuracy = load_table(run, "cloze_accuracy")
            if accuracy is not None and not accuracy.empty:
                st.caption("top-1 / top-5 accuracy per step: " + ", ".join(
                    f"{int(r.step)}: {r.top1:.0%} / {r.top5:.0%}" for r in accuracy.itertuples()))
            steps = sorted(cloze["step"].unique())
            step = st.select_slider("checkpoint step (predictions)", options=steps, value=steps[-1], key="cloze_step")
            shown = cloze[cloze["step"] == step]
            table = (shown.assign(guess=shown["prediction"].astype(str) + " ("
                                  + (shown["probability"] * 100).round(1).astype(str) + "%)")
                     .groupby(["text", "masked"], sort=False)["guess"].apply(lambda g: ", ".join(g)).reset_index())
            st.dataframe(table.rename(columns={"text": "sentence", "masked": "masked word", "guess": "top predictions"}),
                         hide_index=True, width="stretch")


MAIN_TABLE = {"edge_probing": "layer_scores", "feature_combinations": "combinations", "head_types": "head_types",
              "pruning": "pruning_curves", "contextuality": "contextuality", "alignment": "precision",
              "emergence": "probe_scores"}


def page_compare() -> None:
    header("Compare runs")
    studies = sorted({p.parent.name for p in find_runs()} & set(MAIN_TABLE))
    if not studies:
        st.info("No runs to compare yet.")
        return
    study = st.selectbox("study", studies)
    runs = find_runs(study)
    if len(runs) < 2:
        st.info(f"Only one `{study}` run: run the study again with another model, seed or config to compare.")
    c1, c2 = st.columns(2)
    a = c1.selectbox("run A", runs, index=0, format_func=describe)
    b = c2.selectbox("run B", runs, index=min(1, len(runs) - 1), format_func=describe)
    table = MAIN_TABLE[study]
    for col, run in ((c1, a), (c2, b)):
        with col, guard(f"table {table}", run):
            df = load_table(run, table)
            try:
                m = read_manifest(run)
                st.caption(f"model: {model_name(m)} · seed {m.get('seed')}")
            except ResultError as exc:
                st.error(clean(exc))
            if df is not None:
                if study == "edge_probing" and {"task", "layer", "value", "metric"} <= set(df.columns):
                    part = df[df["metric"] == "accuracy"] if "accuracy" in set(df["metric"]) else df
                    if "mode" in part.columns:
                        part = part[part["mode"] == "per_layer"] if "per_layer" in set(part["mode"]) else part
                    st.plotly_chart(line_with_band(mean_ci(part, ["task", "layer"]), "layer", "task", run_label(run),
                                                   "score"), width="stretch", key=f"cmp-{run_label(run)}")
                st.dataframe(df, width="stretch")


# Streamlit's toolbar (Deploy button, menu) is hidden by `--client.toolbarMode viewer`, which the
# CLI and the screenshot script pass; this keeps the chrome clean when the file is run directly.
CLEAN_CHROME = """<style>
[data-testid="stAppDeployButton"], [data-testid="stMainMenu"] {display: none !important;}
</style>"""


def main() -> None:
    st.set_page_config(page_title="BERTology workbench", layout="wide", menu_items={})
    st.html(CLEAN_CHROME)
    st.sidebar.title("BERTology")
    st.sidebar.caption(f"results: {shown_root()}")
    requested = st.query_params.get("page")  # deep links: ?page=Heads (used by the screenshot script)
    index = PAGES.index(requested) if requested in PAGES else 0
    page = st.sidebar.radio("page", PAGES, index=index, key="page")
    {"Runs": page_runs, "Probing": page_probing, "Feature combinations": page_combinations, "Heads": page_heads,
     "Pruning": page_pruning, "Embeddings": page_embeddings, "Alignment": page_alignment,
     "Pretraining": page_pretraining, "Compare runs": page_compare}[page]()


main()
