"""The Live page's Attribution section: which words of the typed sentence an MLM's guess for a
masked word rests on, by gradient × input, integrated gradients (Captum) and attention from the
mask (last layer; rollout), as LIT shows it. The computation is
:func:`bertology.attribution.masked_word_attribution` (core), kept per sentence, word, target and
step count with ``st.cache_data`` like the page's other sections; every typed word reaches the
figure through :func:`bertology.apps.figures.esc` and the summary line is plain text.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from bertology.apps.figures import esc
from bertology.apps.locations import clean
from bertology.apps.ui import chosen, guard, pick_word
from bertology.errors import WorkbenchError
from bertology.models import LoadedModel

if TYPE_CHECKING:  # bertology.attribution loads torch and captum: imported where the section computes
    from bertology.attribution import Attribution

STEPS = (10, 25, 50, 100, 200)  # integrated-gradients points offered; 50 by default
POSITIVE, NEGATIVE = "#1f77b4", "#d62728"


@st.cache_data(max_entries=32, show_spinner="attributing the guess…")
def cached_attribution(
    name: str,
    words: tuple[str, ...],
    word: int,
    target: str | None,
    n_steps: int,
    _lm: LoadedModel,
    foil: str | None = None,
) -> Attribution:
    """The attribution of ``name``'s guess for word ``word`` (``_lm``: that model, not hashed);
    with ``foil``, of ``log p(target) - log p(foil)`` (Yin & Neubig 2022)."""
    from bertology.attribution import masked_word_attribution

    return masked_word_attribution(_lm, list(words), word, target, foil=foil, n_steps=n_steps)


def attribution_section(name: str, lm: LoadedModel, words: tuple[str, ...], masked: int | None = None) -> None:
    """The section, with its own error box (the rest of the page goes on). ``masked``: the word the
    masked-word section above masks (the attribution explains that guess); None: a picker here."""
    with guard("the attribution"):
        _section(name, lm, words, masked)


def _section(name: str, lm: LoadedModel, words: tuple[str, ...], masked: int | None) -> None:
    from bertology.attribution import head_kind

    st.subheader("Attribution: which words the guess rests on")
    st.caption(
        "The word is replaced by the mask and the explained output is log p(target) there (with a foil: "
        "log p(target) - log p(foil), why this word rather than that one; Yin & Neubig 2022). "
        "Gradient × input and integrated gradients (Sundararajan et al. 2017, Captum; baseline: every "
        "word piece replaced by [PAD], special tokens kept) score the input embeddings; attention is the "
        "last layer's attention from the mask (mean of the heads) and the rollout's row -- where the model "
        "looks, not why it decides. Pieces are summed into words; bars are each method's share "
        "(score / sum of |scores| over the words)."
    )
    if head_kind(lm.model) != "mlm":
        st.info(
            f"{name} has no MLM head, so there is no masked-word guess to attribute. For a fine-tuned "
            "classifier run `bertology attribute --model <run>@<step>` or "
            "bertology.attribution.classifier_attribution."
        )
        return
    c1, c2, c4, c3 = st.columns([2, 2, 2, 1])
    if masked is not None and 0 <= masked < len(words):  # one choice on the page: the word masked above
        word = masked
        c1.markdown(f"masked word (chosen above): **{word}: {esc(words[word])}**")
    else:
        word = pick_word(c1, words, "live_attr_word")
    target = c2.text_input("target word (empty: the top guess)", key="live_attr_target", max_chars=50).strip()
    foil = c4.text_input("foil word (contrast; empty: none)", key="live_attr_foil", max_chars=50).strip()
    n_steps = chosen(c3.select_slider("IG steps", options=list(STEPS), value=50, key="live_attr_steps"))
    try:
        result = cached_attribution(name, words, word, target or None, n_steps, lm, foil or None)
    except WorkbenchError as exc:
        st.warning(clean(exc))
        return
    st.text(result.summary())
    st.html(highlighted_sentence(result, "ig" if "ig" in result.methods else result.methods[0]))
    left, right = st.columns([3, 2])
    left.plotly_chart(attribution_figure(result), width="stretch", key="live_attribution")
    right.dataframe(result.by_word().reset_index(), hide_index=True, width="stretch")
    if result.masked_line():
        st.caption(result.masked_line())


def attribution_figure(result: Attribution) -> go.Figure:
    """One panel per method: a horizontal bar per word (top to bottom in sentence order) of its
    normalised score, blue when it raises the explained output, red when it lowers it; the masked
    word (not in the input: the model reads the mask there) keeps its row, labelled with the mask,
    with no bar: it is left out of the shares.
    ``result``: :class:`bertology.attribution.Attribution`."""
    from bertology.attribution import METHOD_TITLES

    wide = result.by_word("normalised", masked=True)
    labels = [_label(result, int(p), str(w)) for p, w in wide.index]
    methods = list(wide.columns)
    fig = make_subplots(
        rows=1,
        cols=len(methods),
        shared_yaxes=True,
        horizontal_spacing=0.03,
        subplot_titles=[wrap_title(METHOD_TITLES[m]) for m in methods],
    )
    fig.update_annotations(font_size=12)  # the panel titles, wrapped to their panel's width
    for col, method in enumerate(methods, start=1):
        values = wide[method].to_numpy(dtype=float)
        fig.add_trace(
            go.Bar(
                x=values,
                y=labels,
                orientation="h",
                marker_color=np.where(values >= 0, POSITIVE, NEGATIVE).tolist(),
                hovertemplate="%{y}: %{x:.3f}<extra></extra>",
                showlegend=False,
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(range=_range(values), row=1, col=col)
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=11))
    fig.update_layout(
        title=f"what {esc(result.model_name)}'s {esc(result.output)} of '{esc(result.target)}' rests on",
        height=max(320, 26 * len(labels) + 140),
        margin=dict(t=120),
    )
    return fig


def wrap_title(text: str, width: int = 14) -> str:
    """A panel title broken into lines of about ``width`` characters (``<br>``), so that four panels'
    titles side by side do not print over each other."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return "<br>".join(lines)


def highlighted_sentence(result: Attribution, method: str) -> str:
    """The sentence as LIT shows it: each word's background blue (raises the output) or red (lowers
    it), as deep as its share of ``method``; the masked word as the mask, boxed, with no colour.
    Every word is HTML-escaped."""
    from bertology.attribution import METHOD_TITLES

    shares = result.by_word("normalised", masked=True)[method]
    spans = []
    for (position, word), share in shares.items():
        text = html.escape(str(word))
        if result.kind == "masked-word" and position == result.word:
            mask = html.escape(result.tokens[result.position])
            spans.append(f'<span style="border:1px solid #888;padding:1px 4px" title="{text}">{mask}</span>')
            continue
        colour = "31,119,180" if share >= 0 else "214,39,40"
        alpha = min(1.0, abs(float(share)) * 2)  # a share of 0.5 or more: full colour
        spans.append(
            f'<span style="background:rgba({colour},{alpha:.2f});padding:1px 3px" title="{share:+.3f}">{text}</span>'
        )
    title = html.escape(METHOD_TITLES[method])
    return f'<div style="line-height:2">{" ".join(spans)} <small>({title}: blue raises, red lowers)</small></div>'


def _label(result: Attribution, position: int, word: str) -> str:
    mask = f" [{esc(result.tokens[result.position])}]" if position == result.word else ""
    return f"{position}: {esc(word)}{mask}"


def _range(values: Any) -> list[float]:
    """A symmetric range for signed shares, 0..max for non-negative ones (attention)."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]  # the masked word's row has no share
    top = float(np.abs(values).max()) if len(values) else 1.0
    top = 1.1 * top if top > 0 else 1.0
    return [0.0, top] if (values >= 0).all() else [-top, top]
