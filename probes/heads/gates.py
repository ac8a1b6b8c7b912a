"""Head gates and real head pruning for Hugging Face BERT-family encoders.

transformers 5.x removed ``head_mask`` (passing it is *silently ignored*: it is swallowed by
``**kwargs``) and ``prune_heads``. This module puts both back, from the outside, for every
architecture of :mod:`bertology.architectures` (the table says where each layer's projections are):

- :class:`HeadGates` installs a forward pre-hook on each layer's attention output projection
  (``attention.output.dense`` for BERT / RoBERTa / ELECTRA / DeBERTa-v2, ``attention.out_lin`` for
  DistilBERT, ``attention.attn.o`` for MPNet, ``attention.dense`` for ALBERT, ``attn.Wo`` for
  ModernBERT, ``self_attn.o_proj`` for EuroBERT / NomicBERT: one slice per *query* head, also under
  grouped-query attention) that multiplies the
  per-head slices of its input ``[batch, tokens, heads * head_dim]`` by a gate ``ξ[layer, head]``
  (or per example, ``ξ[batch, layer, head]``). Gates may require grad (Michel et al. 2019
  importance, Voita et al. 2019 L0 gates). Where layers share parameters (ALBERT) the gates still
  act per layer position.
- :class:`FFNGates` does the same for each layer's feed-forward block: a forward hook on its output
  projection (the architecture table's ``ffn_output``) multiplies the block's output by ``ξ[layer]``.
- :func:`prune_heads` really removes heads: it slices the rows of query / key / value (or of the
  fused query-key-value projection, ModernBERT ``Wqkv``) and the columns of the output projection.
  The kept heads (original numbering) are recorded in ``config.bertology_kept_heads`` so
  :func:`load_pruned` can rebuild the shapes before loading the safetensors weights. Refused for
  shared-parameter layers (ALBERT) and grouped-query attention (a key / value head serves several
  query heads).
"""

from __future__ import annotations

import inspect
import json
import types
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from bertology.architectures import (
    Architecture,
    architecture_for,
    attention_layers,
    get_module,
    key_value_heads,
    num_heads,
    num_layers,
)
from bertology.errors import ModelError
from bertology.models import model_device

if TYPE_CHECKING:
    from transformers import PreTrainedModel

KEPT_HEADS_ATTR = "bertology_kept_heads"


@dataclass
class AttentionBlock:
    """Handles on one layer's self-attention: the projections a gate or a pruning touches."""

    self_attention: nn.Module  # the module computing attention (knows the head size)
    query: nn.Linear | None  # None when query / key / value are fused (``qkv``)
    key: nn.Linear | None
    value: nn.Linear | None
    output: nn.Linear  # the projection whose input is the concatenation of head outputs
    head_dim: int
    layer: nn.Module  # the layer module holding them (the table's paths start there)
    architecture: Architecture
    qkv: nn.Linear | None = None  # fused projection, rows [q | k | v], each heads-major

    @property
    def n_heads(self) -> int:
        """Heads present now (after any pruning): the output projection's input is one slice per head."""
        return self.output.in_features // self.head_dim


def attention_blocks(model: nn.Module) -> list[AttentionBlock]:
    """The self-attention blocks of a supported encoder (:mod:`bertology.architectures`), one per
    layer position, in order (layers sharing parameters give the same modules at several positions)."""
    arch = architecture_for(model)
    return [
        AttentionBlock(
            at.attention,
            at.query,
            at.key,
            at.value,
            at.output,
            int(getattr(at.attention, arch.head_size_attr)),
            at.module,
            arch,
            at.qkv,
        )
        for at in attention_layers(model)
    ]


def kept_heads(model: nn.Module) -> list[list[int]]:
    """Original indices of the heads present in each layer (all heads unless pruned)."""
    config = model.config
    recorded = getattr(config, KEPT_HEADS_ATTR, None)
    n_layers, n_heads = head_shape(model)
    if recorded:
        return [list(recorded.get(str(layer), range(n_heads))) for layer in range(n_layers)]
    return [list(range(n_heads)) for _ in range(n_layers)]


def head_shape(model: nn.Module) -> tuple[int, int]:
    """``(layers, heads)`` of the original (unpruned) architecture."""
    return num_layers(model.config), num_heads(model.config)


class _PositionGates:
    """What head and FFN gates share: one hook per layer position on ``_hooked_modules()`` (a forward
    pre-hook when ``_pre``, else a forward hook; :func:`install_position_hooks`), installed by
    :meth:`install` or ``with``, removed by :meth:`remove` or on leaving the block."""

    _pre = True
    model: nn.Module
    _handles: list

    def _hooked_modules(self) -> list[nn.Module]:
        raise NotImplementedError

    def _hook(self, layer: int):
        raise NotImplementedError

    def install(self):
        if not self._handles:
            self._handles = install_position_hooks(self.model, self._hooked_modules(), self._hook, pre=self._pre)
        return self

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def __enter__(self):
        return self.install()

    def __exit__(self, *exc) -> None:
        self.remove()


class HeadGates(_PositionGates):
    """Multiply each head's output by a gate: ``with HeadGates(model) as g: g.gates[l, h] = 0``.

    ``gates`` is a tensor ``[layers, heads]`` (original head numbering, so it also works on a pruned
    model: gates of removed heads are ignored) or ``[batch, layers, heads]`` for per-example gates.
    Set ``gates`` (attribute) at any time; the hooks read it at each forward. The default gates are
    made on the model's device; gates on another device (e.g. CPU gates for a model on a GPU) are
    copied to the activations' device at each forward (differentiably: gradients reach them).
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
        kept = {}  # the kept heads' index, per device it was needed on (made once)

        def pre_hook(module: nn.Module, args: tuple) -> tuple:
            (x, *rest) = args
            if not self.kept[layer]:
                return args
            g = self.gates.to(x.device)  # the gates themselves when already there
            if x.device not in kept:
                kept[x.device] = torch.tensor(self.kept[layer], dtype=torch.long, device=x.device)
            g = g[..., layer, :].index_select(-1, kept[x.device]).to(x.dtype)  # [H'] or [B, H']
            if g.dim() == 1:
                scale = g.repeat_interleave(block.head_dim)  # [H' * d]
            else:
                scale = g.repeat_interleave(block.head_dim, dim=-1)  # [B, H' * d]
                scale = scale.view(scale.shape[0], *([1] * (x.dim() - 2)), scale.shape[-1])
            return (x * scale, *rest)

        return pre_hook

    def _hooked_modules(self) -> list[nn.Module]:
        return [block.output for block in self.blocks]


def install_position_hooks(model: nn.Module, modules: Sequence[nn.Module], make_hook, *, pre: bool) -> list:
    """Register ``make_hook(position)`` on ``modules[position]`` for every layer position (a forward
    pre-hook when ``pre``, else a forward hook); returns the handles. Where one module runs at several
    positions (ALBERT's shared layers), its calls within a forward are counted (reset when the base
    model starts one) so that each call gets its position's hook."""
    handles: list[torch.utils.hooks.RemovableHandle] = []
    register = "register_forward_pre_hook" if pre else "register_forward_hook"
    positions: dict[int, list[int]] = {}
    for layer, module in enumerate(modules):
        positions.setdefault(id(module), []).append(layer)
    if all(len(p) == 1 for p in positions.values()):
        return [getattr(module, register)(make_hook(layer)) for layer, module in enumerate(modules)]
    calls = dict.fromkeys(positions, 0)

    def reset(module: nn.Module, args: tuple) -> None:
        for key in calls:
            calls[key] = 0

    base = getattr(model, "base_model", model)
    handles.append(base.register_forward_pre_hook(reset))
    for key, layers in positions.items():
        hooks = [make_hook(layer) for layer in layers]

        def shared_hook(module: nn.Module, *args, key: int = key, hooks: list = hooks):
            call = calls[key]
            calls[key] = call + 1
            return hooks[call % len(hooks)](module, *args)

        handles.append(getattr(modules[layers[0]], register)(shared_hook))
    return handles


class FFNGates(_PositionGates):
    """Multiply each layer's feed-forward output (its output projection's output, bias included,
    before the residual sum) by a gate: ``with FFNGates(model) as g: g.gates[l] = 0`` switches layer
    ``l``'s FFN off (Prasanna et al. 2020's MLP masking). ``gates``: ``[layers]`` or ``[batch,
    layers]`` (per-example, for importance); may require grad. Works per layer position, also where
    layers share parameters (ALBERT). Default gates are made on the model's device; gates on another
    device are copied to the output's device at each forward."""

    _pre = False  # a forward hook: the block's output, bias included, is scaled

    def __init__(self, model: nn.Module, gates: torch.Tensor | None = None):
        from bertology.architectures import ffn_outputs

        self.model = model
        self.modules = ffn_outputs(model)
        if gates is None:
            param = next(model.parameters())
            gates = torch.ones(len(self.modules), dtype=param.dtype, device=param.device)
        self.gates = gates
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def _hook(self, layer: int):
        def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
            g = self.gates[..., layer].to(output.device, output.dtype)  # [] or [B]
            if g.dim() == 1:
                g = g.view(g.shape[0], *([1] * (output.dim() - 1)))
            return output * g

        return hook

    def _hooked_modules(self) -> list[nn.Module]:
        return self.modules


def gates_from_heads(model: nn.Module, heads_off: dict[int, list[int]] | list[tuple[int, int]]) -> torch.Tensor:
    """A ``[layers, heads]`` gate tensor of ones with the given heads (original numbering) at 0, on
    the model's device."""
    n_layers, n_heads = head_shape(model)
    gates = torch.ones(n_layers, n_heads)
    items = heads_off.items() if isinstance(heads_off, dict) else _group(heads_off).items()
    for layer, heads in items:
        for head in heads:
            gates[int(layer), int(head)] = 0.0
    return gates.to(model_device(model))  # filled on the CPU, moved once


def ones_gates(model: nn.Module, *shape: int) -> torch.Tensor:
    """Gates of ones of ``shape`` (float32) on the model's device."""
    return torch.ones(*shape, device=model_device(model))


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
        new = nn.Linear(
            weight.shape[1], weight.shape[0], bias=bias is not None, device=weight.device, dtype=weight.dtype
        )
    new.weight = nn.Parameter(weight, requires_grad=linear.weight.requires_grad)
    if bias is not None:
        new.bias = nn.Parameter(bias, requires_grad=linear.bias.requires_grad)
    return new


def _empty_forward(self, hidden_states: torch.Tensor, *args, **kwargs):
    """Forward of a self-attention module with every head removed: no output, no weights."""
    shape = hidden_states.shape[:-1]
    out = hidden_states.new_zeros(*shape, 0)
    weights = hidden_states.new_zeros(shape[0], 0, shape[1], shape[1])
    inside = getattr(self, "_bertology_output_name", None)
    if inside:  # DistilBERT, MPNet: the module applies the output projection itself
        return get_module(self, inside)(out), weights
    return out, weights


def _replace(layer: nn.Module, path: str, new: nn.Linear) -> None:
    parent, _, name = path.rpartition(".")
    owner = get_module(layer, parent) if parent else layer
    if owner is None or get_module(owner, name) is None:
        raise ModelError(f"could not find projection {path!r} in {type(layer).__name__}")
    setattr(owner, name, new)


def _select_head_bias(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Forward pre-hook of a pruned attention module receiving a per-head bias computed for all
    heads (MPNet ``position_bias`` ``[batch, heads, T, T]``): keep the kept heads' slice."""
    name, position, heads = cast(tuple[str, int, list[int]], module._bertology_head_bias)
    if name in kwargs and kwargs[name] is not None:
        bias = kwargs[name]
        kwargs = {**kwargs, name: bias.index_select(1, torch.tensor(heads, dtype=torch.long, device=bias.device))}
    elif position < len(args) and args[position] is not None:
        bias = args[position]
        index = torch.tensor(heads, dtype=torch.long, device=bias.device)
        args = (*args[:position], bias.index_select(1, index), *args[position + 1 :])
    return args, kwargs


def _keep_head_bias(sa: nn.Module, argument: str, kept: list[int]) -> None:
    params = [p for p in inspect.signature(type(sa).forward).parameters if p != "self"]
    if argument not in params:
        raise ModelError(f"{type(sa).__name__}.forward has no argument {argument!r} (per-head bias)")
    if not hasattr(sa, "_bertology_head_bias"):
        sa.register_forward_pre_hook(_select_head_bias, with_kwargs=True)
    sa.__dict__["_bertology_head_bias"] = (argument, params.index(argument), list(kept))  # plain data, not a submodule


def prune_heads(model: nn.Module, heads_to_prune: dict[int, list[int]]) -> nn.Module:
    """Remove heads in place: ``{layer: [original head indices]}``. Returns ``model``.

    Slices rows of query / key / value (and of further per-head projections the architecture
    table names) and columns of the output projection; updates the head count / ``all_head_size``
    on the attention module and records the kept heads in ``config.bertology_kept_heads``
    (``{"layer": [original heads kept]}``). Pruning again composes. A layer with every head
    removed keeps only the output bias. Refused for models whose layers share parameters (ALBERT)
    and for grouped-query attention (EuroBERT with fewer key / value heads than query heads): use
    :class:`HeadGates` there, which act per layer position and per query head.
    """
    _refuse_pruning(model, heads_to_prune)
    arch = architecture_for(model)
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
        index = torch.tensor(
            [p * d + i for p in positions for i in range(d)], dtype=torch.long, device=block.output.weight.device
        )
        sa = block.self_attention
        if arch.qkv and block.qkv is not None:  # fused rows [q | k | v] of the current heads, each heads-major
            width = block.n_heads * d
            fused = torch.cat([index + part * width for part in range(3)])
            _replace(block.layer, arch.qkv, _slice_linear(block.qkv, fused, 0))
        else:
            for path, proj in ((arch.query, block.query), (arch.key, block.key), (arch.value, block.value)):
                if proj is None:
                    raise ModelError(f"prune_heads: layer {layer} has no {path!r} projection")
                _replace(block.layer, path, _slice_linear(proj, index, 0))
        for name in arch.extra_head_projections:
            proj = get_module(sa, name)
            if proj is not None:
                _replace(sa, name, _slice_linear(proj, index, 0))
        _replace(block.layer, arch.output, _slice_linear(block.output, index, 1))
        if arch.heads_attr:
            setattr(sa, arch.heads_attr, len(new_kept))
        if hasattr(sa, "all_head_size"):
            sa.__dict__["all_head_size"] = len(new_kept) * d  # an int attribute of the module
        if arch.head_bias_argument:
            _keep_head_bias(sa, arch.head_bias_argument, new_kept)
        if not new_kept:
            inside = arch.output[len(arch.attention) + 1 :] if arch.output_inside_attention else None
            sa.__dict__["_bertology_output_name"] = inside  # read by _empty_forward
            sa.forward = types.MethodType(_empty_forward, sa)
        kept_all[layer] = new_kept
    setattr(model.config, KEPT_HEADS_ATTR, {str(layer): heads for layer, heads in enumerate(kept_all)})
    return model


def real_pruning_refusal(model: nn.Module) -> str | None:
    """Why real pruning of this model cannot equal switching its heads off, or None when it can:
    layers sharing parameters (ALBERT) or grouped-query attention (EuroBERT with fewer key / value
    heads than query heads). Gates (:class:`HeadGates`) work in both cases."""
    arch = architecture_for(model)
    if arch.shares_layers:
        return (
            f"{arch.model_type} layers share their parameters ({arch.groups_field}="
            f"{getattr(model.config, str(arch.groups_field))} for {num_layers(model.config)} layers), so removing a "
            "head would remove it at every layer position; real pruning is not supported for "
            f"{arch.model_type} — switch heads off per position with HeadGates instead"
        )
    n_heads, n_kv = num_heads(model.config), key_value_heads(model.config)
    if n_kv != n_heads:
        return (
            f"{arch.model_type} uses grouped-query attention ({arch.kv_heads_field}={n_kv} key / value heads "
            f"for {n_heads} query heads), so each key / value head serves {n_heads // n_kv} query heads and a "
            "query head cannot be removed with its own key and value rows; real pruning is not supported for "
            f"this {arch.model_type} model — switch query heads off with HeadGates instead"
        )
    return None


def _refuse_pruning(model: nn.Module, heads_to_prune: dict[int, list[int]]) -> None:
    """Raise :class:`ModelError` naming the model type and the reason (:func:`real_pruning_refusal`)
    when heads are to be removed from a model that cannot lose them for real."""
    if not any(len(heads) for heads in heads_to_prune.values()):
        return
    reason = real_pruning_refusal(model)
    if reason:
        raise ModelError(f"prune_heads: {reason}")


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def save_pruned(model: PreTrainedModel, directory: str | Path, tokenizer=None) -> Path:
    """``save_pretrained`` (safetensors) a pruned model; the kept heads travel in ``config.json``.

    The weights keep the model's own parameter names (``save_original_format=False``): transformers
    would otherwise write some types in their hub layout (NomicBERT: fused ``Wqkv``, renamed norms),
    which :func:`load_pruned` reads back into the pruned shapes without transformers' converters."""
    directory = Path(directory)
    model.save_pretrained(directory, safe_serialization=True, save_original_format=False)
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
    model = (
        model_class.from_config(config, **kwargs)
        if model_class is transformers.AutoModel
        else model_class._from_config(config, **kwargs)
    )
    if kept:
        n_heads = head_shape(model)[1]
        prune_heads(
            model, {int(layer): [h for h in range(n_heads) if h not in set(heads)] for layer, heads in kept.items()}
        )
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ModelError(f"{directory}: no *.safetensors weights")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    missing, unexpected = model.load_state_dict(state, strict=False)
    # tied weights (e.g. MLM decoder) may be absent from the file; anything else is an error
    tied = set(getattr(model, "all_tied_weights_keys", None) or {})
    missing = [
        k
        for k in missing
        if k not in tied and not k.endswith(("decoder.weight", "decoder.bias")) and "position_ids" not in k
    ]
    if missing or unexpected:
        raise ModelError(
            f"{directory}: weights do not match the pruned architecture: "
            f"missing {missing[:5]}, unexpected {list(unexpected)[:5]}"
        )
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
