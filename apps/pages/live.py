"""The Live page: pick a model (a registry name, a model folder or a Hugging Face hub name), type a
sentence or pick one of the bundled corpus, and see what the model does with it: every head at once
(model view), one head (head view, tokens or words), its query/key neurons (neuron view), attention
rollout across layers, and, for a model with an MLM head, its guesses for a masked word.

The one page that loads a model: the computation is :mod:`bertology.inspection` (core); the model
is cached per process with ``st.cache_resource`` and each sentence's maps with ``st.cache_data``
(in memory; nothing is written to disk). A hub name is looked up in the Hugging Face cache only:
the dashboard reads and never downloads (:func:`refusal` says to ``bertology models pull`` it).
Every word typed reaches the figures through :func:`bertology.apps.figures.esc` and is
never rendered as markdown. Deep links: ``?model=<name, folder or org/name[@REV]>`` and
``?text=<sentence>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from bertology.apps import figures
from bertology.apps.figures import esc, word_labels
from bertology.apps.locations import clean
from bertology.apps.pages.live_attribution import attribution_section
from bertology.apps.pages.page import Page
from bertology.apps.ui import chosen, guard, pick_word, query
from bertology.errors import WorkbenchError
from bertology.models import DEFAULT_MODEL, LoadedModel, list_models, load_model
from bertology.numbering import head_number, layer_number

if TYPE_CHECKING:  # bertology.inspection loads torch: imported where the page computes, not when the dashboard starts
    from bertology.inspection import Inspection, Level

DEFAULT_TEXT = "The old jury said the county election was conducted well, didn't it?"
DIRECTORY = "a model folder or hub name…"
CORPUS = "brown-sample"
CORPUS_SENTENCES = 300  # the first sentences of the bundled corpus offered in the picker
TOP_K = 10


@st.cache_resource(max_entries=2, show_spinner="loading the model…")
def cached_model(name_or_path: str) -> LoadedModel:
    """The model with its MLM head when its weights carry one, else the encoder alone (eager
    attention, float32, CPU). Kept for the life of the server process (two models at most). A hub
    name from the Hugging Face cache only (``offline=True``): the dashboard never downloads."""
    try:
        return load_model(name_or_path, mlm_head=True, offline=True)
    except WorkbenchError as exc:
        if "carry no MLM head" not in str(exc):
            raise
    return load_model(name_or_path, offline=True)


def refusal(name: str, exc: WorkbenchError) -> str:
    """The line shown when ``name`` does not load: for a name that is no registry name, no folder
    and nothing in the Hugging Face cache, that the dashboard never downloads and how to fetch it
    (``bertology models pull``); else the error as it is."""
    from pathlib import Path

    from bertology import hub

    parsed = hub.parse_name(name)
    if parsed is None or Path(name).expanduser().exists() or hub.cached(parsed, loadable=False) is not None:
        return clean(exc)
    return clean(
        f"model {name!r}: not a registry name, a model folder or in the Hugging Face cache ({hub.cache_dir()}); "
        f"the dashboard only reads and never downloads: fetch a hub model first with `bertology models pull {name}` "
        "(`bertology models` lists what is here), then pick it again"
    )


@st.cache_data(max_entries=32, show_spinner=False)
def cached_inspection(name_or_path: str, words: tuple[str, ...]) -> Inspection:
    from bertology.inspection import inspect_sentence

    return inspect_sentence(cached_model(name_or_path), list(words))


@st.cache_data(max_entries=64, show_spinner=False)
def cached_predictions(name_or_path: str, words: tuple[str, ...], word: int) -> Any:
    from bertology.inspection import masked_predictions

    return masked_predictions(cached_model(name_or_path), list(words), word, k=TOP_K)


@st.cache_data(show_spinner=False)
def corpus_sentences() -> list[tuple[str, ...]]:
    """Word lists of the first :data:`CORPUS_SENTENCES` sentences of the bundled corpus."""
    from bertology.corpus import load_corpus

    return [tuple(s.words) for s in load_corpus(CORPUS, limit=CORPUS_SENTENCES)]


def registry_names() -> list[str]:
    """Installed registry models and the hub cache's loadable models, the default first."""
    models = list_models()
    names = [str(n) for n in models.loc[models["installed"].astype(bool), "name"]]
    return sorted(dict.fromkeys(names), key=lambda n: (n != DEFAULT_MODEL, n))


def pick_model() -> str | None:
    """A registry name, a model folder or a hub name ``org/name[@REV]`` (``?model=`` preselects any);
    None until one is typed."""
    names = registry_names()
    wanted = query("model")
    options = [*names, DIRECTORY]
    index = options.index(wanted) if wanted in names else (len(names) if wanted else 0)
    choice = st.selectbox(
        "model",
        options,
        index=index,
        key="live_model",
        help="a model of the registry or the hub cache (`bertology models`), a local Hugging Face folder, "
        "or a hub name already in the Hugging Face cache (org/name[@revision]; the dashboard never downloads: "
        "`bertology models pull NAME` fetches one)",
    )
    if choice != DIRECTORY:
        return choice
    folder = st.text_input(
        "model folder (config.json + model.safetensors + tokenizer.json) or hub name in the cache "
        "(org/name[@revision]; `bertology models pull` fetches one)",
        value=wanted if wanted and wanted not in names else "",
        key="live_dir",
    )
    return folder.strip() or None


def pick_words() -> tuple[str, ...] | None:
    """The sentence's words: typed (split into words and punctuation) or a corpus sentence as it is
    tokenised there (``?text=`` fills the box)."""
    from bertology.inspection import split_words

    source = st.radio("sentence", ["type one", f"from the {CORPUS} corpus"], horizontal=True, key="live_source")
    if source == "type one":
        text = st.text_input(
            "sentence (press Enter)", value=query("text") or DEFAULT_TEXT, key="live_text", max_chars=1000
        )
        try:
            return tuple(split_words(text))
        except WorkbenchError as exc:
            st.warning(clean(exc))
            return None
    sentences = corpus_sentences()
    pick: int = chosen(
        st.selectbox(
            "corpus sentence",
            range(len(sentences)),
            key="live_corpus",
            format_func=lambda k: " ".join(sentences[k])[:120],
        )
    )
    return sentences[pick]


def head_section(ins: Inspection, level: Level) -> tuple[int, int]:
    """One head's map at the chosen level, as a heatmap and as bertviz-style lines; returns the head's
    0-based array indices (the widgets and titles show its numbers, layers and heads from 1)."""
    st.subheader("Head view")
    c1, c2 = st.columns(2)
    layer: int = chosen(c1.selectbox("layer", range(ins.n_layers), key="live_layer", format_func=_layer_label))
    head: int = chosen(c2.selectbox("head", range(ins.n_heads), key="live_head", format_func=_head_label))
    rows, columns, maps = ins.maps(level)
    matrix = maps[layer, head]
    name = f"layer {layer_number(layer)}, head {head_number(head)}"
    left, right = st.columns(2)
    left.plotly_chart(
        figures.attention_heatmap(
            rows,
            matrix,
            f"{name} ({level}s)",
            columns=columns,
            first_row=1 if level == "word" else 0,  # the words sit after [CLS] among the columns: one number each
        ),
        width="stretch",
        key="live_head_map",
    )
    lit = st.session_state.get(HIGHLIGHT)
    right.plotly_chart(
        figures.head_view(
            rows,
            matrix,
            f"{name}: lines ≥ 0.05",
            targets=columns,
            first_row=1 if level == "word" else 0,  # the words sit after [CLS] in both columns
            highlight=lit if isinstance(lit, int) and lit < len(rows) else None,
        ),
        width="stretch",
        key="live_head_lines",
        on_select=remember_highlight,
        selection_mode="points",
    )
    right.caption("Hover a unit: where its attention goes. Click it: its lines in orange (double-click: all).")
    return layer, head


def _layer_label(index: int) -> str:
    """A widget's label of transformer layer ``index`` (0-based): its number, from 1."""
    return str(layer_number(index))


def _head_label(index: int) -> str:
    """A widget's label of head ``index`` (0-based): its number, from 1."""
    return str(head_number(index))


HIGHLIGHT = "live_highlight"  # session state: the attending row whose head-view lines are highlighted


def remember_highlight() -> None:
    """On a click in the head view: highlight the clicked attending unit's lines (a label on the
    left or one of its lines); an empty selection (double-click) clears it."""
    event = st.session_state.get("live_head_lines")
    points = list(event.get("selection", {}).get("points", [])) if event else []
    rows = [row for row in map(clicked_row, points) if row is not None]
    st.session_state[HIGHLIGHT] = rows[0] if rows else None


def clicked_row(point: dict) -> int | None:
    """The attending row a clicked point of :func:`bertology.apps.figures.head_view` stands for: a
    line's ``customdata`` starts with it, a left label's is it (-1: a unit that attends nowhere)."""
    data = point.get("customdata")
    if isinstance(data, (list, tuple)) and data:
        return int(data[0])
    if isinstance(data, (int, float)) and point.get("x") == 0 and data >= 0:
        return int(data)
    return None


def neuron_section(ins: Inspection, layer: int, head: int) -> None:
    from bertology.inspection import qk_contributions

    st.subheader("Neuron view")
    st.caption(
        "How the head's score for one query token is built: its query vector q times each token's key "
        "vector k, dimension by dimension; the sum of q ⊙ k over the head's dimensions divided by √d is "
        "the score, and the row of scores softmaxes into the attention row (right)."
    )
    if not ins.exact_scores:
        st.info(f"{ins.model_type} adds relative-position terms to the score: q·k/√d is only its content part.")
    query_token: int = chosen(
        st.selectbox(
            "query token",
            range(len(ins.tokens)),
            index=min(1, len(ins.tokens) - 1),
            key="live_query",
            format_func=lambda t: f"{t}: {ins.tokens[t]}",
        )
    )
    q, k = ins.queries[layer, head], ins.keys[layer, head]
    st.plotly_chart(
        neuron_view(
            ins.tokens,
            q[query_token],
            k,
            qk_contributions(q, k, query_token),
            ins.attentions[layer, head, query_token],
            query_token,
            f"layer {layer_number(layer)}, head {head_number(head)}, query {query_token}",
        ),
        width="stretch",
        key="live_neurons",
    )


def rollout_section(ins: Inspection) -> None:
    from bertology.inspection import attention_rollout

    st.subheader("Attention rollout (Abnar & Zuidema 2020)")
    st.caption(
        "Per layer A′ = ½·(mean of the heads' maps) + ½·I (the residual connection), rows renormalised; "
        "the rollout after layer l is A′ₗ·…·A′₁ (layers from 1): how much of each token's representation there flows "
        "from each input token."
    )
    rollout = attention_rollout(ins.attentions)
    layer = st.select_slider(
        "after layer",
        options=list(range(ins.n_layers)),
        value=ins.n_layers - 1,
        key="live_rollout_layer",
        format_func=_layer_label,
    )
    st.plotly_chart(
        figures.attention_heatmap(ins.tokens, rollout[layer], f"rollout after layer {layer_number(layer)}"),
        width="stretch",
        key="live_rollout",
    )


def mlm_section(name: str, lm: LoadedModel, words: tuple[str, ...]) -> int | None:
    """The masked-word guesses for the word picked here; that word (None: the model has no MLM head)."""
    st.subheader("Masked-word predictions")
    if not lm.has_mlm_head or lm.model is lm.encoder:
        st.info(
            f"{name} has no MLM head (its weights carry none), so it cannot guess a masked word. Pick a "
            "model with one, e.g. the workbench's own minilm-english-mlm (or bert-mini-english)."
        )
        return None
    word = pick_word(st, words, "live_mask")
    top = cached_predictions(name, words, word)
    left, right = st.columns([3, 2])
    left.plotly_chart(predictions_figure(top, words[word]), width="stretch", key="live_predictions")
    right.dataframe(top, hide_index=True, width="stretch")
    return word


def live_page(page: Page) -> None:
    name = pick_model()
    words = pick_words()
    if name is None or words is None:
        st.info("Pick a model and type a sentence.")
        return
    try:
        lm = cached_model(name)
        ins = cached_inspection(name, words)
    except WorkbenchError as exc:
        st.error(refusal(name, exc))
        return
    st.caption(
        f"{lm.name}: {ins.n_layers} layers × {ins.n_heads} heads, {len(ins.tokens)} tokens for {len(ins.words)} words"
    )
    level: Level = chosen(
        st.radio(
            "units",
            ["token", "word"],
            horizontal=True,
            key="live_level",
            help="word: attention to a word summed over its pieces, from a word averaged over its pieces "
            "(Clark et al. 2019); the special tokens stay as columns",
        )
    )
    rows, columns, maps = ins.maps(level)
    with guard("the model view"):
        st.subheader("Model view: every head of every layer")
        st.plotly_chart(
            model_view(maps, f"{lm.name}: attention of every head ({level}s; row attends to column)"),
            width="stretch",
            key="live_model_view",
        )
    with guard("the head view"):
        layer, head = head_section(ins, level)
        neuron_section(ins, layer, head)
    with guard("the rollout"):
        rollout_section(ins)
    masked = None
    with guard("the masked-word predictions"):
        masked = mlm_section(name, lm, words)
    attribution_section(name, lm, words, masked)  # its own guard; apps/pages/live_attribution.py


# --------------------------------------------------------------------------- figures


def model_view(maps: Any, title: str, width: int = 1100) -> go.Figure:
    """bertviz's model view as one mosaic: the attention map of every head of every layer at once
    (row = layer, layer 1 at the top; column = head, from 1), shared colour scale 0..1, maps separated by a
    blank line. ``maps``: ``[layers, heads, rows, columns]`` (row = the attending unit); with fewer
    rows than columns (word units: the words against ``[CLS]``, the words, ``[SEP]``) each tile is
    square, the rows placed beside their own columns and the special tokens' rows blank, so a
    previous-word head is the sub-diagonal in either unit."""
    maps = square_maps(np.asarray(maps, dtype=float))
    L, H, R, C = maps.shape
    mosaic = np.full((L * (R + 1) - 1, H * (C + 1) - 1), np.nan)
    for l in range(L):
        for h in range(H):
            mosaic[l * (R + 1) : l * (R + 1) + R, h * (C + 1) : h * (C + 1) + C] = maps[l, h]
    fig = go.Figure(
        go.Heatmap(
            z=mosaic,
            colorscale="Blues",
            zmin=0,
            zmax=1,
            hoverongaps=False,
            colorbar=dict(title="attention"),
            hovertemplate="%{z:.2f}<extra></extra>",
        )
    )
    cell = max(2.0, min(12.0, (width - 160) / (H * (C + 1))))
    fig.update_layout(
        title=esc(title),
        height=int(min(2400, 120 + cell * L * (R + 1))),
        plot_bgcolor="white",
        margin=dict(t=60),
        xaxis=dict(
            tickmode="array",
            tickvals=[h * (C + 1) + (C - 1) / 2 for h in range(H)],
            ticktext=[f"head {head_number(h)}" for h in range(H)],
            side="top",
            showgrid=False,
            zeroline=False,
        ),
        yaxis=dict(
            tickmode="array",
            tickvals=[l * (R + 1) + (R - 1) / 2 for l in range(L)],
            ticktext=[f"layer {layer_number(l)}" for l in range(L)],
            autorange="reversed",
            showgrid=False,
            zeroline=False,
            scaleanchor="x",
        ),
    )
    return fig


def square_maps(maps: np.ndarray) -> np.ndarray:
    """``maps`` ``[L, H, R, C]`` with ``R < C`` (word units: the ``R`` words are columns 1..R of
    ``[CLS]``, the words, ``[SEP]``) as ``[L, H, C, C]``, each row beside its own column and the
    rows of the other columns NaN (blank); square maps as they are."""
    L, H, R, C = maps.shape
    if R >= C:
        return maps
    first = (C - R) // 2
    out = np.full((L, H, C, C), np.nan)
    out[:, :, first : first + R] = maps
    return out


def neuron_view(
    tokens: Sequence[str], query_vector: Any, keys: Any, contributions: Any, attention_row: Any, query: int, title: str
) -> go.Figure:
    """bertviz's neuron view of one head for one query token: every token's key vector ``k_j``
    (``[T, d]``), the elementwise products ``q ⊙ k_j`` (``[T, d]``; their sum over ``d`` divided by
    ``sqrt(d)`` is the score) and the attention row it softmaxes into (``[T]``, right), with the
    query vector ``q`` (``[d]``) above both grids on the same x axis, so ``q_d`` sits above ``k_jd``
    and ``(q ⊙ k_j)_d``. Diverging colours centred on 0. Traces: q, keys, products, q again, the
    attention bars."""
    q = np.asarray(query_vector, dtype=float)[None, :]
    keys, parts = np.asarray(keys, dtype=float), np.asarray(contributions, dtype=float)
    labels = word_labels(tokens)
    dims = list(range(q.shape[1]))
    height = max(400, 22 * len(labels) + 230)
    plot = height - 150  # the layout's top and bottom margins
    fig = make_subplots(
        rows=2,
        cols=3,
        column_widths=[0.38, 0.38, 0.24],
        row_heights=[34 / plot, 1 - 34 / plot],
        horizontal_spacing=0.04,
        vertical_spacing=46 / plot,  # room for the "attention" title between the rows
        shared_xaxes="columns",
        specs=[[{}, {}, None], [{}, {}, {}]],
        subplot_titles=[f"q of {labels[query]} above the keys k_j", "q above q ⊙ k_j (sum / √d = score)", "attention"],
    )
    fig.add_trace(_signed_heatmap(q, dims, [labels[query]], "q, dim %{x}: %{z:.3f}"), row=1, col=1)
    fig.add_trace(_signed_heatmap(keys, dims, labels, "k of %{y}, dim %{x}: %{z:.3f}"), row=2, col=1)
    fig.add_trace(_signed_heatmap(parts, dims, labels, "q ⊙ k of %{y}, dim %{x}: %{z:.3f}"), row=2, col=2)
    fig.add_trace(_signed_heatmap(q, dims, [labels[query]], "q, dim %{x}: %{z:.3f}"), row=1, col=2)
    fig.add_trace(
        go.Bar(
            x=np.asarray(attention_row, dtype=float),
            y=labels,
            orientation="h",
            marker_color="#1f77b4",
            hovertemplate="%{y}: %{x:.2f}<extra></extra>",
            showlegend=False,
        ),
        row=2,
        col=3,
    )
    for col in (1, 2, 3):
        fig.update_yaxes(autorange="reversed", row=2, col=col, showticklabels=col == 1, tickfont=dict(size=10))
    fig.update_yaxes(showticklabels=False, row=1, col=2)
    fig.update_yaxes(tickfont=dict(size=10), row=1, col=1)
    fig.update_xaxes(title_text="dimension of the head", row=2, col=1)
    fig.update_xaxes(title_text="dimension of the head", row=2, col=2)
    fig.update_xaxes(range=[0, 1], row=2, col=3)
    fig.update_annotations(font_size=13, yshift=4)
    fig.update_layout(title=esc(title), height=height, margin=dict(t=100, b=50))
    return fig


def _signed_heatmap(z: np.ndarray, x: list[int], y: list[str], hover: str) -> go.Heatmap:
    """A heatmap of signed values in diverging colours centred on 0 (no colour bar)."""
    scale = float(np.abs(z).max()) or 1.0
    return go.Heatmap(
        z=z,
        x=x,
        y=y,
        colorscale="RdBu",
        zmid=0,
        zmin=-scale,
        zmax=scale,
        showscale=False,
        hovertemplate=hover + "<extra></extra>",
    )


def predictions_figure(top: pd.DataFrame, word: str) -> go.Figure:
    """Horizontal bars: the MLM's top tokens for a masked word, best first, with their probability.
    ``top``: ``rank, token, probability`` (:func:`bertology.inspection.masked_predictions`)."""
    labels = [f"{int(r)}. {esc(t)}" for r, t in zip(top["rank"], top["token"])]
    fig = go.Figure(
        go.Bar(
            x=top["probability"],
            y=labels,
            orientation="h",
            marker_color="#9467bd",
            text=[f"{p:.1%}" for p in top["probability"]],
            textposition="outside",
            hovertemplate="%{y}: %{x:.3f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"what the MLM head puts in place of '{esc(word)}'",
        height=120 + 28 * len(labels),
        xaxis=dict(title="probability", range=[0, min(1.0, 1.3 * float(top["probability"].max()))]),
        yaxis=dict(autorange="reversed"),
        margin=dict(t=50),
    )
    return fig


# --------------------------------------------------------------------------- the registry entry

PAGE = Page(
    key="Live",
    title="Live: any sentence through any model",
    intro="Type a sentence (or pick one from the corpus) and see what a model does with it, computed now: "
    "every head of every layer at once and one head in detail (as bertviz's model and head views; "
    "Vig 2019), how a head's query and key neurons make its scores (neuron view), attention rollout "
    "across layers (Abnar & Zuidema 2020), and an MLM's guesses for a masked word.",
    render=live_page,
    min_charts=4,
)
