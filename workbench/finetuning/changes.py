"""What fine-tuning changed: per-layer relative weight change ``||ΔW|| / ||W||`` per module
(attention, FFN, LayerNorm, embeddings), and per-layer representation similarity (linear CKA,
:func:`bertology.similarity.linear_cka`) between the pretrained and the fine-tuned encoder on the
same words (:func:`layer_cka`), and per-head change of attention (:func:`attention_change`: mean
Jensen--Shannon divergence between each head's attention rows before and after, on the same sentences).

For a group of tensors ``G`` (one module kind of one layer) the change is
``sqrt(sum_{W in G} ||W_after - W_before||_F^2) / sqrt(sum_{W in G} ||W_before||_F^2)``: the
Frobenius norm of the whole group's update relative to the group's pretrained norm, so a large
tensor is not averaged away by a small one. Only tensors both models have are compared (the new
head, a pooler the pretrained model lacks and adapters have no "before").
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import torch

from bertology.numbering import head_number, layer_number

__all__ = [
    "module_kind",
    "relative_weight_change",
    "weight_change_between",
    "layer_cka",
    "attention_change",
    "js_divergence_rows",
]

_ENCODER_NAME = re.compile(r"^(?:[A-Za-z_]+\.)?((?:embeddings|encoder)\..*)$")
_LAYER = re.compile(r"\blayer\.(\d+)\.")


def module_kind(name: str) -> tuple[int, str] | None:
    """``(layer, kind)`` of an encoder parameter name (layer -1 for the embeddings; kind one of
    ``embeddings``, ``attention``, ``ffn``, ``layernorm``); None for anything else (heads,
    poolers, MLM heads, adapters)."""
    m = _ENCODER_NAME.match(name)
    if not m or ".adapter." in name:
        return None
    name = m.group(1)
    if name.startswith("embeddings."):
        return -1, "embeddings"
    layer = _LAYER.search(name)
    if layer is None:
        return None
    index = int(layer.group(1))
    if "LayerNorm" in name or "layer_norm" in name:
        return index, "layernorm"
    if ".attention." in name:
        return index, "attention"
    if ".intermediate." in name or ".output." in name:
        return index, "ffn"
    return None


def relative_weight_change(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> pd.DataFrame:
    """Tidy table, one row per (layer, module): ``layer`` (0 = embeddings, transformer layers 1..L as
    everywhere, :mod:`bertology.numbering`), ``module``,
    ``n_tensors``, ``n_parameters``, ``delta_norm``, ``weight_norm``, ``relative_change``.

    ``before`` / ``after``: state dicts (names may carry a task model's base prefix, ``bert.``);
    tensors are matched by their name inside the encoder."""

    def by_encoder_name(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = {}
        for key, value in state.items():
            m = _ENCODER_NAME.match(key)
            if m:
                out[m.group(1)] = value
        return out

    old, new = by_encoder_name(before), by_encoder_name(after)
    sums: dict[tuple[int, str], list[float]] = {}
    for name in sorted(old.keys() & new.keys()):
        kind = module_kind(name)
        if kind is None or old[name].shape != new[name].shape:
            continue
        w0, w1 = old[name].double(), new[name].double()
        acc = sums.setdefault(kind, [0.0, 0.0, 0, 0])
        acc[0] += float(((w1 - w0) ** 2).sum())
        acc[1] += float((w0**2).sum())
        acc[2] += 1
        acc[3] += w0.numel()
    rows = [
        {
            "layer": layer_number(layer),  # module_kind's index -1 (embeddings) -> 0, layer index i -> i + 1
            "module": kind,
            "n_tensors": int(n),
            "n_parameters": int(p),
            "delta_norm": d**0.5,
            "weight_norm": w**0.5,
            "relative_change": (d**0.5) / (w**0.5) if w > 0 else float("nan"),
        }
        for (layer, kind), (d, w, n, p) in sorted(sums.items())
    ]
    return pd.DataFrame(
        rows, columns=["layer", "module", "n_tensors", "n_parameters", "delta_norm", "weight_norm", "relative_change"]
    )


def weight_change_between(pretrained: str | Path, finetuned: str | Path) -> pd.DataFrame:
    """:func:`relative_weight_change` of two registry models or model directories (safetensors)."""
    from safetensors.torch import load_file

    from bertology.models import resolve

    def weights(name: str | Path) -> dict[str, torch.Tensor]:
        _, path = resolve(name)
        files = sorted(path.glob("model*.safetensors"))
        state: dict[str, torch.Tensor] = {}
        for f in files:
            state.update(load_file(str(f)))
        return state

    return relative_weight_change(weights(pretrained), weights(finetuned))


def layer_cka(before, after, corpus, *, root: str | Path | None = None, progress: bool = False) -> pd.DataFrame:
    """Linear CKA per hidden-state layer between two encoders (``LoadedModel``: e.g. pretrained and
    fine-tuned) over the words of ``corpus`` (first sub-word vectors from the feature store, which
    caches them under ``root``): columns ``layer`` (0 = embeddings), ``cka``, ``n_words``.
    ``ConfigError`` when the two models have different layer counts or word counts."""
    from bertology.errors import ConfigError
    from bertology.similarity import linear_cka
    from bertology.store import extract

    stores = [
        extract(lm, corpus, pooling="first", attentions=False, root=root, progress=progress) for lm in (before, after)
    ]
    if stores[0].n_layers != stores[1].n_layers or stores[0].n_words != stores[1].n_words:
        raise ConfigError(
            f"layer_cka: {before.name} and {after.name} differ in layers "
            f"({stores[0].n_layers} vs {stores[1].n_layers}) or words "
            f"({stores[0].n_words} vs {stores[1].n_words}) over {corpus.name}"
        )
    return pd.DataFrame(
        [
            {
                "layer": layer,
                "cka": linear_cka(stores[0].layer(layer), stores[1].layer(layer)),
                "n_words": stores[0].n_words,
            }
            for layer in range(stores[0].n_layers)
        ],
        columns=["layer", "cka", "n_words"],
    )


def js_divergence_rows(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen--Shannon divergence in bits (in [0, 1]) between attention rows ``p`` and ``q``
    ``[..., keys]`` (each a distribution over the keys): ``[...]``. 0 exactly for equal rows."""
    p, q = p.double(), q.double()
    m = (p + q) / 2

    def kl_to_m(x: torch.Tensor) -> torch.Tensor:
        return torch.where(
            x > 0, x * (torch.log2(x.clamp_min(1e-300)) - torch.log2(m.clamp_min(1e-300))), torch.zeros_like(x)
        ).sum(-1)

    return (0.5 * kl_to_m(p) + 0.5 * kl_to_m(q)).clamp_min(0.0)


def attention_change(
    before, after, sentences: list[list[str]], *, batch_size: int = 16, max_length: int = 128
) -> pd.DataFrame:
    """Per head, the mean Jensen--Shannon divergence (bits) between its attention rows in ``before``
    and in ``after`` (``LoadedModel`` s loaded with ``attentions=True``: e.g. pretrained and
    fine-tuned) over every query sub-word (``[CLS]`` and ``[SEP]`` included) of ``sentences``
    (pre-split words, tokenised by ``before``'s tokenizer and truncated to ``max_length``):
    columns ``layer`` (transformer layers 1..L), ``head`` (1..H), ``js_divergence``, ``n_rows``.
    0 at every head for identical models; ``ConfigError`` for models of different shapes."""
    from bertology.errors import ConfigError

    if (before.num_layers, before.config.num_attention_heads) != (after.num_layers, after.config.num_attention_heads):
        raise ConfigError(f"attention_change: {before.name} and {after.name} differ in layers or heads")
    totals = torch.zeros(before.num_layers, before.config.num_attention_heads, dtype=torch.float64)
    n_rows = 0
    for start in range(0, len(sentences), batch_size):
        enc = before.tokenizer(
            [list(s) for s in sentences[start : start + batch_size]],
            is_split_into_words=True,
            truncation=True,
            max_length=max_length,
            padding=True,
            return_tensors="pt",
        )
        inputs = {k: v for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        with torch.no_grad():
            maps = [lm.encoder.eval()(**inputs, output_attentions=True).attentions for lm in (before, after)]
        valid = inputs["attention_mask"].bool()  # [B, T]: real query tokens
        for layer, (p, q) in enumerate(zip(*maps)):  # [B, H, T, T] each
            js = js_divergence_rows(p, q)  # [B, H, T]
            totals[layer] += (js * valid[:, None, :]).sum(dim=(0, 2))
        n_rows += int(valid.sum())
    rows = [
        {
            "layer": layer_number(layer),
            "head": head_number(head),
            "js_divergence": float(totals[layer, head]) / max(n_rows, 1),
            "n_rows": n_rows,
        }
        for layer in range(totals.shape[0])
        for head in range(totals.shape[1])
    ]
    return pd.DataFrame(rows, columns=["layer", "head", "js_divergence", "n_rows"])
