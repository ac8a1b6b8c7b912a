"""Head gates and real head pruning for Hugging Face BERT-family encoders.

transformers 5.x removed ``head_mask`` (passing it is *silently ignored*: it is swallowed by
``**kwargs``) and ``prune_heads``. This module puts both back, from the outside:

- :class:`HeadGates` installs a forward pre-hook on each layer's attention output projection
  (``attention.output.dense`` for BERT / RoBERTa / ELECTRA, ``attention.out_lin`` for DistilBERT)
  that multiplies the per-head slices of its input ``[batch, tokens, heads * head_dim]`` by a gate
  ``ξ[layer, head]`` (or per example, ``ξ[batch, layer, head]``). Gates may require grad (Michel et
  al. 2019 importance, Voita et al. 2019 L0 gates).
- :func:`prune_heads` really removes heads: it slices the rows of query / key / value and the
  columns of the output projection. The kept heads (original numbering) are recorded in
  ``config.bertology_kept_heads`` so :func:`load_pruned` can rebuild the shapes before loading
  the safetensors weights.
"""

from __future__ import annotations

import json
import types
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from torch import nn

from bertology.errors import ModelError

KEPT_HEADS_ATTR = "bertology_kept_heads"


@dataclass
class AttentionBlock:
    """Handles on one layer's self-attention: the projections a gate or a pruning touches."""

    self_attention: nn.Module  # the module computing attention (has ``attention_head_size``)
    query: nn.Linear
    key: nn.Linear
    value: nn.Linear
    output: nn.Linear  # the projection whose input is the concatenation of head outputs
    head_dim: int

    @property
    def n_heads(self) -> int:
        return self.query.out_features // self.head_dim


def attention_blocks(model: nn.Module) -> list[AttentionBlock]:
    """The self-attention blocks of a BERT / RoBERTa / ELECTRA / DistilBERT model, layer order."""
    base = getattr(model, "base_model", model)
    blocks: list[AttentionBlock] = []
    encoder = getattr(base, "encoder", None)
    if encoder is not None and hasattr(encoder, "layer"):
        for layer in encoder.layer:
            sa = layer.attention.self
            blocks.append(AttentionBlock(sa, sa.query, sa.key, sa.value, layer.attention.output.dense,
                                         int(sa.attention_head_size)))
        return blocks
    transformer = getattr(base, "transformer", None)
    if transformer is not None and hasattr(transformer, "layer"):  # DistilBERT
        for layer in transformer.layer:
            at = layer.attention
            head_dim = int(getattr(at, "attention_head_size", at.q_lin.out_features // at.n_heads))
            blocks.append(AttentionBlock(at, at.q_lin, at.k_lin, at.v_lin, at.out_lin, head_dim))
        return blocks
    raise ModelError(f"{type(model).__name__}: no BERT-style encoder.layer or DistilBERT transformer.layer "
                     "found; head gates support BERT, RoBERTa, ELECTRA and DistilBERT")


def kept_heads(model: nn.Module) -> list[list[int]]:
    """Original indices of the heads present in each layer (all heads unless pruned)."""
    config = model.config
    recorded = getattr(config, KEPT_HEADS_ATTR, None)
    n_layers = config.num_hidden_layers if hasattr(config, "num_hidden_layers") else config.n_layers
    n_heads = config.num_attention_heads if hasattr(config, "num_attention_heads") else config.n_heads
    if recorded:
        return [list(recorded.get(str(layer), range(n_heads))) for layer in range(n_layers)]
    return [list(range(n_heads)) for _ in range(n_layers)]


def head_shape(model: nn.Module) -> tuple[int, int]:
    """``(layers, heads)`` of the original (unpruned) architecture."""
    config = model.config
    n_layers = getattr(config, "num_hidden_layers", None) or config.n_layers
    n_heads = getattr(config, "num_attention_heads", None) or config.n_heads
    return int(n_layers), int(n_heads)


class HeadGates:
    """Multiply each head's output by a gate: ``with HeadGates(model) as g: g.gates[l, h] = 0``.

    ``gates`` is a tensor ``[layers, heads]`` (original head numbering, so it also works on a pruned
    model: gates of removed heads are ignored) or ``[batch, layers, heads]`` for per-example gates.
    Set ``gates`` (attribute) at any time; the hooks read it at each forward.
    """

    def __init__(self, model: nn.Module, gates: torch.Tensor | None = None):
        self.model = model
        self.blocks = attention_blocks(model)
        self.kept = kept_heads(model)
        n_layers, n_heads = head_shape(model)
        if gates is None:
            param = next(model.parameters())
            gates = torch.ones(n_layers, n_heads, dtype=param.dtype, device=param.device)
        self.gates = gates
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def _hook(self, layer: int):
        block = self.blocks[layer]
        index = torch.tensor(self.kept[layer], dtype=torch.long)

        def pre_hook(module: nn.Module, args: tuple) -> tuple:
            (x, *rest) = args
            if index.numel() == 0:
                return args
            g = self.gates
            g = g[..., layer, :].index_select(-1, index.to(g.device)).to(x.dtype)  # [H'] or [B, H']
            if g.dim() == 1:
                scale = g.repeat_interleave(block.head_dim)  # [H' * d]
            else:
                scale = g.repeat_interleave(block.head_dim, dim=-1)  # [B, H' * d]
                scale = scale.view(scale.shape[0], *([1] * (x.dim() - 2)), scale.shape[-1])
            return (x * scale, *rest)

        return pre_hook

    def install(self) -> "HeadGates":
        if self._handles:
            return self
        for layer, block in enumerate(self.blocks):
            self._handles.append(block.output.register_forward_pre_hook(self._hook(layer)))
        return self

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def __enter__(self) -> "HeadGates":
        return self.install()

    def __exit__(self, *exc) -> None:
        self.remove()


def gates_from_heads(model: nn.Module, heads_off: dict[int, list[int]] | list[tuple[int, int]]) -> torch.Tensor:
    """A ``[layers, heads]`` gate tensor of ones with the given heads (original numbering) at 0."""
    n_layers, n_heads = head_shape(model)
    gates = torch.ones(n_layers, n_heads)
    items = heads_off.items() if isinstance(heads_off, dict) else _group(heads_off).items()
    for layer, heads in items:
        for head in heads:
            gates[int(layer), int(head)] = 0.0
    return gates


def _group(pairs: list[tuple[int, int]]) -> dict[int, list[int]]:
    grouped: dict[int, list[int]] = {}
    for layer, head in pairs:
        grouped.setdefault(int(layer), []).append(int(head))
    return grouped


def _slice_linear(linear: nn.Linear, index: torch.Tensor, dim: int) -> nn.Linear:
    """A new Linear keeping ``index`` rows (dim 0, output features) or columns (dim 1, inputs)."""
    weight = linear.weight.detach().index_select(dim, index).clone()
    bias = None
    if linear.bias is not None:
        bias = linear.bias.detach().clone() if dim == 1 else linear.bias.detach().index_select(0, index).clone()
    with warnings.catch_warnings():  # zero-width layers (all heads removed) warn at init
        warnings.simplefilter("ignore")
        new = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None,
                        device=weight.device, dtype=weight.dtype)
    new.weight = nn.Parameter(weight, requires_grad=linear.weight.requires_grad)
    if bias is not None:
        new.bias = nn.Parameter(bias, requires_grad=linear.bias.requires_grad)
    return new


def _empty_forward(self, hidden_states: torch.Tensor, *args, **kwargs):
    """Forward of a self-attention module with every head removed: no output, no weights."""
    shape = hidden_states.shape[:-1]
    out = hidden_states.new_zeros(*shape, 0)
    weights = hidden_states.new_zeros(shape[0], 0, shape[1], shape[1])
    if hasattr(self, "out_lin"):  # DistilBERT applies the output projection inside
        return self.out_lin(out), weights
    return out, weights


def _set_attr(parent: nn.Module, child: nn.Linear, new: nn.Linear) -> None:
    for name, module in parent.named_children():
        if module is child:
            setattr(parent, name, new)
            return
    raise ModelError(f"could not find projection {child} in {type(parent).__name__}")


def prune_heads(model: nn.Module, heads_to_prune: dict[int, list[int]]) -> nn.Module:
    """Remove heads in place: ``{layer: [original head indices]}``. Returns ``model``.

    Slices rows of query / key / value and columns of the output projection; updates
    ``num_attention_heads`` / ``all_head_size`` on the module and records the kept heads in
    ``config.bertology_kept_heads`` (``{"layer": [original heads kept]}``). Pruning again composes.
    A layer with every head removed keeps only the output bias.
    """
    blocks = attention_blocks(model)
    kept_all = kept_heads(model)
    for layer, heads in heads_to_prune.items():
        layer = int(layer)
        if not 0 <= layer < len(blocks):
            raise ModelError(f"prune_heads: layer {layer} out of range 0..{len(blocks) - 1}")
        block, kept = blocks[layer], kept_all[layer]
        remove = {int(h) for h in heads}
        new_kept = [h for h in kept if h not in remove]
        if new_kept == kept:
            continue
        positions = [kept.index(h) for h in new_kept]  # positions in the current (maybe pruned) module
        d = block.head_dim
        index = torch.tensor([p * d + i for p in positions for i in range(d)], dtype=torch.long,
                             device=block.query.weight.device)
        sa = block.self_attention
        for proj in (block.query, block.key, block.value):
            _set_attr(sa, proj, _slice_linear(proj, index, 0))
        out_parent = sa if hasattr(sa, "out_lin") and sa.out_lin is block.output else None
        if out_parent is None:
            out_parent = next(m for m in model.modules()
                              if any(c is block.output for c in m.children()))
        _set_attr(out_parent, block.output, _slice_linear(block.output, index, 1))
        for attr in ("num_attention_heads", "n_heads"):
            if hasattr(sa, attr):
                setattr(sa, attr, len(new_kept))
        if hasattr(sa, "all_head_size"):
            sa.all_head_size = len(new_kept) * d
        if not new_kept:
            sa.forward = types.MethodType(_empty_forward, sa)
        kept_all[layer] = new_kept
    setattr(model.config, KEPT_HEADS_ATTR, {str(layer): heads for layer, heads in enumerate(kept_all)})
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def save_pruned(model: nn.Module, directory: str | Path, tokenizer=None) -> Path:
    """``save_pretrained`` (safetensors) a pruned model; the kept heads travel in ``config.json``."""
    directory = Path(directory)
    model.save_pretrained(directory, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)
    return directory


def load_pruned(directory: str | Path, model_class=None, **kwargs) -> nn.Module:
    """Load a model saved by :func:`save_pruned`: rebuild pruned shapes, then load safetensors.

    ``model_class`` defaults to the class named in ``config.json`` ``architectures`` (from
    ``transformers``), else ``AutoModel``. Never runs remote code.
    """
    import transformers
    from safetensors.torch import load_file

    directory = Path(directory)
    config_path = directory / "config.json"
    if not config_path.exists():
        raise ModelError(f"{config_path}: missing config.json of a pruned model")
    config = transformers.AutoConfig.from_pretrained(directory, trust_remote_code=False)
    if model_class is None:
        arch = (getattr(config, "architectures", None) or [None])[0]
        model_class = getattr(transformers, arch, None) if arch else None
        if model_class is None:
            model_class = transformers.AutoModel
    kwargs.setdefault("attn_implementation", "eager")
    kept = getattr(config, KEPT_HEADS_ATTR, None)
    if hasattr(config, KEPT_HEADS_ATTR):
        delattr(config, KEPT_HEADS_ATTR)  # build the full model first, then prune to the record
    model = model_class.from_config(config, **kwargs) if model_class is transformers.AutoModel \
        else model_class._from_config(config, **kwargs)
    if kept:
        n_heads = head_shape(model)[1]
        prune_heads(model, {int(layer): [h for h in range(n_heads) if h not in set(heads)]
                            for layer, heads in kept.items()})
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ModelError(f"{directory}: no *.safetensors weights")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    missing, unexpected = model.load_state_dict(state, strict=False)
    # tied weights (e.g. MLM decoder) may be absent from the file; anything else is an error
    missing = [k for k in missing if not k.endswith(("decoder.weight", "decoder.bias")) and "position_ids" not in k]
    if missing or unexpected:
        raise ModelError(f"{directory}: weights do not match the pruned architecture: "
                         f"missing {missing[:5]}, unexpected {list(unexpected)[:5]}")
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    model.eval()
    return model


def describe_pruning(model: nn.Module) -> str:
    return json.dumps(getattr(model.config, KEPT_HEADS_ATTR, None))


def iter_heads(model: nn.Module) -> Iterator[tuple[int, int]]:
    """All ``(layer, head)`` pairs of the original architecture."""
    n_layers, n_heads = head_shape(model)
    for layer in range(n_layers):
        for head in range(n_heads):
            yield layer, head
