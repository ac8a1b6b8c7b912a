"""BERTology dashboard: browse study runs. It only reads result files (parquet + JSON) — it never
loads a model or computes what a study should have saved.

Run with ``bertology dashboard`` (binds to 127.0.0.1) or
``streamlit run $(python -c "import bertology.apps as a; print(a.__path__[0])")/dashboard.py --server.address 127.0.0.1``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from bertology.results import ResultError, mean_ci, read_extra, read_manifest, read_table

PAGES = ["Runs", "Probing", "Feature combinations", "Heads", "Pruning", "Embeddings", "Alignment",
         "Pretraining", "Compare runs"]
PAGE_STUDY = {"Probing": "edge_probing", "Feature combinations": "feature_combinations", "Heads": "head_types",
              "Pruning": "pruning", "Embeddings": "contextuality", "Alignment": "alignment",
              "Pretraining": "emergence"}


def results_root() -> Path:
    return Path(os.environ.get("BERTOLOGY_RESULTS", Path.cwd() / "results"))


def find_runs(study: str | None = None) -> list[Path]:
    root = results_root()
    pattern = f"{study}/*" if study else "*/*"
    return sorted((p for p in root.glob(pattern) if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)


def run_label(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def load_table(run: Path, name: str) -> pd.DataFrame | None:
    """A run's table, or None with a clear message when it is missing or corrupt."""
    try:
        return read_table(run, name)
    except ResultError as exc:
        st.warning(str(exc))
        return None


def load_extra(run: Path, name: str):
    try:
        return read_extra(run, name)
    except ResultError as exc:
        st.info(str(exc))
        return None


def pick_run(study: str, key: str, label: str = "run") -> Path | None:
    runs = find_runs(study)
    if not runs:
        st.info(f"No `{study}` runs under {results_root()}. Run `bertology study run {study}` "
                f"(or `bertology study run quickstart`).")
        return None
    choice = st.selectbox(label, [run_label(r) for r in runs], key=key)
    run = results_root() / choice
    try:
        manifest = read_manifest(run)
    except ResultError as exc:
        st.error(str(exc))
        return None
    with st.expander("provenance"):
        st.json({k: manifest.get(k) for k in ("study", "run_id", "seed", "config", "model", "corpus",
                                                "wall_seconds", "git_commit", "packages") if k in manifest})
    return run


def need(df: pd.DataFrame | None, columns: list[str], what: str) -> bool:
    if df is None:
        return False
    missing = [c for c in columns if c not in df.columns]
    if missing:
        st.warning(f"{what}: table lacks columns {missing}")
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
        fig.add_trace(go.Scatter(x=part[x], y=part["mean"], mode="lines+markers", name=str(name),
                                 line=dict(color=c)))
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y_title, height=420)
    return fig


# --------------------------------------------------------------------------- pages

def page_runs() -> None:
    st.header("Runs")
    runs = find_runs()
    if not runs:
        st.info(f"No results under {results_root()}. Create some with `bertology study run quickstart`.")
        return
    rows = []
    for r in runs:
        try:
            m = read_manifest(r)
            rows.append({"study": r.parent.name, "run": r.name, "seed": m.get("seed"),
                         "model": (m.get("model") or {}).get("name") if isinstance(m.get("model"), dict) else m.get("model"),
                         "tables": ", ".join(m.get("tables", [])), "seconds": m.get("wall_seconds"),
                         "status": "complete"})
        except ResultError as exc:
            rows.append({"study": r.parent.name, "run": r.name, "status": f"unreadable: {exc}"})
    st.dataframe(pd.DataFrame(rows), width="stretch")


def page_probing() -> None:
    st.header("Edge probing (Tenney et al. 2019)")
    run = pick_run("edge_probing", "probe_run")
    if run is None:
        return
    scores = load_table(run, "layer_scores")
    if need(scores, ["task", "layer", "metric", "value", "seed"], "layer_scores"):
        if "split" in scores.columns:  # held-out test scores; dev was used for early stopping
            scores = scores[scores["split"] == "test"]
        if "control" in scores.columns:
            scores = scores[~scores["control"].astype(bool)]
        metrics = sorted(scores["metric"].unique())
        metric = st.selectbox("metric", metrics, index=metrics.index("accuracy") if "accuracy" in metrics else 0)
        part = scores[scores["metric"] == metric]
        if "mode" in part.columns:
            modes = sorted(part["mode"].unique())
            mode = st.selectbox("probe input", modes, index=modes.index("per_layer") if "per_layer" in modes else 0)
            part = part[part["mode"] == mode]
        st.plotly_chart(line_with_band(mean_ci(part, ["task", "layer"]), "layer", "task",
                                       f"{metric} per layer (mean ± 95% CI over seeds)", metric), width="stretch")
    summary = load_table(run, "summary")
    if summary is not None:
        st.subheader("Expected layers (Table 1 style)")
        st.dataframe(summary, width="stretch")
    weights = load_table(run, "mix_weights")
    if need(weights, ["task", "layer", "weight"], "mix_weights"):
        fig = px.bar(weights.groupby(["task", "layer"], as_index=False)["weight"].mean(), x="layer", y="weight",
                     color="task", barmode="group", title="scalar-mix weights")
        st.plotly_chart(fig, width="stretch")
    controls = load_table(run, "controls")
    if controls is not None:
        st.subheader("Control tasks (Hewitt & Liang 2019) and MDL (Voita & Titov 2020)")
        st.dataframe(controls, width="stretch")
    mdl = load_table(run, "mdl")
    if mdl is not None:
        st.dataframe(mdl, width="stretch")


def page_combinations() -> None:
    st.header("Feature-based combinations (Devlin et al. 2019, Table 7)")
    run = pick_run("feature_combinations", "combo_run")
    if run is None:
        return
    df = load_table(run, "combinations")
    if need(df, ["combination", "task", "metric", "value"], "combinations"):
        metric = st.selectbox("metric", sorted(df["metric"].unique()))
        part = mean_ci(df[df["metric"] == metric], ["task", "combination"])
        fig = px.bar(part, x="combination", y="mean", error_y="ci95", color="task", barmode="group",
                     title=f"{metric} by feature combination")
        st.plotly_chart(fig, width="stretch")
        st.dataframe(part, width="stretch")


def attention_heatmap(words: list[str], matrix: list[list[float]], title: str) -> go.Figure:
    fig = go.Figure(go.Heatmap(z=matrix, x=[f"{i}:{w}" for i, w in enumerate(words)],
                               y=[f"{i}:{w}" for i, w in enumerate(words)], colorscale="Blues", zmin=0))
    fig.update_layout(title=title, yaxis_autorange="reversed", height=520, xaxis_title="attended word",
                      yaxis_title="attending word")
    return fig


def head_view(words: list[str], matrix: list[list[float]], title: str) -> go.Figure:
    """bertviz-style view, drawn offline: lines from each attending word (left) to attended words (right)."""
    fig = go.Figure()
    n = len(words)
    for i in range(n):
        for j in range(n):
            w = matrix[i][j]
            if w > 0.05:
                fig.add_trace(go.Scatter(x=[0, 1], y=[-i, -j], mode="lines", hoverinfo="text",
                                         text=f"{words[i]} → {words[j]}: {w:.2f}",
                                         line=dict(width=1 + 6 * w, color=f"rgba(31,119,180,{min(1.0, 0.15 + w)})"),
                                         showlegend=False))
    fig.add_trace(go.Scatter(x=[0] * n, y=[-i for i in range(n)], mode="text", text=words, textposition="middle left",
                             showlegend=False))
    fig.add_trace(go.Scatter(x=[1] * n, y=[-i for i in range(n)], mode="text", text=words,
                             textposition="middle right", showlegend=False))
    fig.update_layout(title=title, height=max(300, 22 * n), xaxis=dict(visible=False, range=[-0.6, 1.6]),
                      yaxis=dict(visible=False))
    return fig


def page_heads() -> None:
    st.header("Attention heads (Voita et al. 2019, Clark et al. 2019)")
    run = pick_run("head_types", "heads_run")
    if run is None:
        return
    types = load_table(run, "head_types")
    if need(types, ["layer", "head", "type"], "head_types"):
        hover_cols = [c for c in types.columns if c not in ("layer", "head", "type")]
        kinds = sorted(types["type"].unique())
        code = {k: i for i, k in enumerate(kinds)}
        grid = types.pivot(index="layer", columns="head", values="type")
        text = types.assign(txt=types.apply(lambda r: "<br>".join(
            [f"type: {r['type']}"] + [f"{c}: {r[c]:.3g}" if isinstance(r[c], float) else f"{c}: {r[c]}" for c in hover_cols[:8]]),
            axis=1)).pivot(index="layer", columns="head", values="txt")
        fig = go.Figure(go.Heatmap(z=grid.replace(code).values, x=list(grid.columns), y=list(grid.index),
                                   text=text.values, hoverinfo="text", colorscale="Viridis",
                                   colorbar=dict(tickvals=list(code.values()), ticktext=kinds)))
        fig.update_layout(title="head types (layer × head)", xaxis_title="head", yaxis_title="layer", height=420)
        st.plotly_chart(fig, width="stretch")
        st.dataframe(types["type"].value_counts().rename_axis("type").reset_index(name="heads"))
    probe = load_table(run, "attention_probe")
    if probe is not None:
        st.subheader("Attention-based dependency probe (Clark et al.)")
        st.dataframe(probe, width="stretch")
    examples = load_extra(run, "attention_examples")
    if examples and examples.get("sentences"):
        st.subheader("Attention of one sentence")
        sents = examples["sentences"]
        k = st.selectbox("sentence", range(len(sents)), format_func=lambda i: " ".join(sents[i]["words"])[:90])
        att = sents[k]["attention"]
        c1, c2 = st.columns(2)
        layer = c1.number_input("layer", 0, len(att) - 1, 0)
        head = c2.number_input("head", 0, len(att[0]) - 1, 0)
        words = sents[k]["words"]
        st.plotly_chart(attention_heatmap(words, att[layer][head], f"layer {layer}, head {head}"), width="stretch")
        st.plotly_chart(head_view(words, att[layer][head], "head view"), width="stretch")


def page_pruning() -> None:
    st.header("Head importance and pruning (Michel et al. 2019, Voita et al. 2019)")
    run = pick_run("pruning", "prune_run")
    if run is None:
        return
    curves = load_table(run, "pruning_curves")
    if need(curves, ["method", "share_removed", "value"], "pruning_curves"):
        part = mean_ci(curves, ["method", "share_removed"])
        st.plotly_chart(line_with_band(part, "share_removed", "method", "metric vs share of heads removed",
                                       str(curves["metric"].iloc[0]) if "metric" in curves else "metric"),
                        width="stretch")
    imp = load_table(run, "importance")
    if need(imp, ["layer", "head", "importance"], "importance"):
        grid = imp.groupby(["layer", "head"])["importance"].mean().unstack()
        st.plotly_chart(px.imshow(grid, labels=dict(x="head", y="layer", color="importance"),
                                  title="head importance (normalised per layer)"), width="stretch")
    for name in ("pruning_cost", "l0_gates"):
        df = load_table(run, name)
        if df is not None:
            st.subheader(name.replace("_", " "))
            st.dataframe(df, width="stretch")


def page_embeddings() -> None:
    st.header("Static vs contextual embeddings (Ethayarajh 2019)")
    run = pick_run("contextuality", "ctx_run")
    if run is None:
        return
    ctx = load_table(run, "contextuality")
    if need(ctx, ["layer", "metric"], "contextuality"):
        value_cols = [c for c in ("raw", "baseline", "adjusted") if c in ctx.columns]
        long = ctx.melt(id_vars=["layer", "metric"], value_vars=value_cols, var_name="kind", value_name="value")
        fig = px.line(long, x="layer", y="value", color="metric", line_dash="kind", markers=True,
                      title="contextuality per layer (raw, anisotropy baseline, adjusted)")
        st.plotly_chart(fig, width="stretch")
    clusters = load_table(run, "sense_clusters")
    if need(clusters, ["word", "x", "y"], "sense_clusters"):
        word = st.selectbox("polysemous word", sorted(clusters["word"].unique()))
        part = clusters[clusters["word"] == word]
        fig = px.scatter(part, x="x", y="y", color=part["cluster"].astype(str) if "cluster" in part else None,
                         hover_data=[c for c in ("context", "sentence") if c in part.columns],
                         title=f"UMAP of '{word}' across contexts")
        st.plotly_chart(fig, width="stretch")
    neighbours = load_table(run, "neighbours")
    if neighbours is not None:
        st.subheader("Static vs contextual neighbours")
        st.dataframe(neighbours, width="stretch")


def page_alignment() -> None:
    st.header("Rotation alignment (Procrustes, self-learning, CSLS)")
    run = pick_run("alignment", "align_run")
    if run is None:
        return
    prec = load_table(run, "precision")
    if prec is not None:
        st.subheader("P@k on held-out dictionary")
        st.dataframe(prec, width="stretch")
    tr = load_table(run, "translations")
    if tr is not None:
        st.subheader("Translations")
        st.dataframe(tr.head(300), width="stretch")
    moved = load_table(run, "most_moved")
    if moved is not None:
        st.subheader("Words that move most between the two spaces")
        st.dataframe(moved, width="stretch")


def page_pretraining() -> None:
    st.header("Pretraining and emergence")
    run = pick_run("emergence", "pt_run")
    if run is None:
        return
    metrics = load_table(run, "training_metrics")
    if need(metrics, ["step", "metric", "value"], "training_metrics"):
        loss = metrics[metrics["metric"].isin(["loss", "eval_loss"])]
        st.plotly_chart(px.line(loss, x="step", y="value", color="metric", markers=True,
                                title="MLM loss (nats/token): training and held-out"), width="stretch")
        ppl = metrics[metrics["metric"] == "perplexity"]
        if len(ppl):
            st.plotly_chart(px.line(ppl, x="step", y="value", markers=True, title="held-out perplexity"),
                            width="stretch")
    heads = load_table(run, "head_counts")
    if need(heads, ["step", "type", "count"], "head_counts"):
        st.plotly_chart(px.line(heads, x="step", y="count", color="type", markers=True,
                                title="head types across checkpoints"), width="stretch")
    probes = load_table(run, "probe_scores")
    if need(probes, ["step", "task", "value"], "probe_scores"):
        best = probes.groupby(["step", "task"], as_index=False)["value"].max()
        st.plotly_chart(px.line(best, x="step", y="value", color="task", markers=True,
                                title="best-layer probe accuracy across checkpoints"), width="stretch")
    cloze = load_table(run, "cloze_predictions") if (run / "cloze_predictions.parquet").is_file() else None
    if cloze is not None and not cloze.empty and need(cloze, ["step", "text", "masked", "rank", "prediction",
                                                              "probability"], "cloze_predictions"):
        st.subheader("What the model predicts for a masked word")
        accuracy = load_table(run, "cloze_accuracy")
        if accuracy is not None and not accuracy.empty:
            st.caption("top-1 / top-5 accuracy per step: " + ", ".join(
                f"{int(r.step)}: {r.top1:.0%} / {r.top5:.0%}" for r in accuracy.itertuples()))
        steps = sorted(cloze["step"].unique())
        step = st.select_slider("checkpoint step", options=steps, value=steps[-1], key="cloze_step")
        shown = cloze[cloze["step"] == step]
        table = (shown.assign(guess=shown["prediction"] + " (" + (shown["probability"] * 100).round(1).astype(str) + "%)")
                 .groupby(["text", "masked"], sort=False)["guess"].apply(lambda g: ", ".join(g)).reset_index())
        st.dataframe(table.rename(columns={"text": "sentence", "masked": "masked word", "guess": "top predictions"}),
                     hide_index=True, width="stretch")


MAIN_TABLE = {"edge_probing": "layer_scores", "feature_combinations": "combinations", "head_types": "head_types",
              "pruning": "pruning_curves", "contextuality": "contextuality", "alignment": "precision",
              "emergence": "probe_scores"}


def page_compare() -> None:
    st.header("Compare two runs")
    studies = sorted({p.parent.name for p in find_runs()} & set(MAIN_TABLE))
    if not studies:
        st.info("No runs to compare yet.")
        return
    study = st.selectbox("study", studies)
    runs = find_runs(study)
    if len(runs) < 2:
        st.info(f"Only one `{study}` run: run the study again with another model, seed or config to compare.")
    labels = [run_label(r) for r in runs]
    c1, c2 = st.columns(2)
    a = c1.selectbox("run A", labels, index=0)
    b = c2.selectbox("run B", labels, index=min(1, len(labels) - 1))
    table = MAIN_TABLE[study]
    for col, label in ((c1, a), (c2, b)):
        with col:
            df = load_table(results_root() / label, table)
            try:
                m = read_manifest(results_root() / label)
                st.caption(f"model: {m.get('model', {}).get('name') if isinstance(m.get('model'), dict) else m.get('model')} · "
                           f"seed {m.get('seed')}")
            except ResultError as exc:
                st.error(str(exc))
            if df is not None:
                if study == "edge_probing" and {"task", "layer", "value", "metric"} <= set(df.columns):
                    part = df[df["metric"] == "accuracy"] if "accuracy" in set(df["metric"]) else df
                    if "mode" in part.columns:
                        part = part[part["mode"] == "per_layer"] if "per_layer" in set(part["mode"]) else part
                    st.plotly_chart(line_with_band(mean_ci(part, ["task", "layer"]), "layer", "task", label, "score"),
                                    width="stretch", key=f"cmp-{label}")
                st.dataframe(df, width="stretch")


def main() -> None:
    st.set_page_config(page_title="BERTology workbench", layout="wide")
    st.sidebar.title("BERTology")
    st.sidebar.caption(f"results: {results_root()}")
    requested = st.query_params.get("page")  # deep links: ?page=Heads (used by the screenshot script)
    index = PAGES.index(requested) if requested in PAGES else 0
    page = st.sidebar.radio("page", PAGES, index=index, key="page")
    {"Runs": page_runs, "Probing": page_probing, "Feature combinations": page_combinations, "Heads": page_heads,
     "Pruning": page_pruning, "Embeddings": page_embeddings, "Alignment": page_alignment,
     "Pretraining": page_pretraining, "Compare runs": page_compare}[page]()


main()
