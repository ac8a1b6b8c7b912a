"""Record and replace an encoder's activations with forward hooks, once for every architecture of
:mod:`bertology.architectures` (the table says where the layers and the attention output projections
are; :func:`bertology.probes.heads.gates.install_position_hooks` handles layers that share their
parameters, ALBERT).

Two kinds of site (TransformerLens's ``hook_resid_*`` and ``hook_z``, for encoders):

- **hidden state** ``l`` in ``0..L``: ``l = 0`` is the input of layer position 0 -- the embeddings,
  after any projection to the hidden size (what Hugging Face returns as ``hidden_states[0]``) --,
  ``l >= 1`` the output of layer position ``l - 1`` (before any final norm of the encoder), each
  ``[batch, tokens, hidden]``;
- **head context** of layer ``l``: the input of its attention output projection (the table's
  ``output``, where :class:`~bertology.probes.heads.gates.HeadGates` act) ``[batch, tokens, heads *
  head_dim]``; head ``h``'s output is the slice ``h * head_dim : (h + 1) * head_dim`` of it, before the
  projection mixes the heads into the residual stream.

A patch replaces chosen entries of a site by a source tensor with :func:`torch.where` (an exact
copy, made on the activations' device; never in place).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

from bertology.architectures import architecture_for, layer_modules
from bertology.errors import ModelError
from bertology.probes.heads.gates import attention_blocks, install_position_hooks, kept_heads

__all__ = ["Activations", "Patch", "recording", "patching", "head_dim", "head_layout"]

StateFn = Callable[[torch.Tensor], torch.Tensor | None]


@dataclass
class Activations:
    """What one forward computed at every site: ``states[l]`` ``[batch, tokens, hidden]`` for ``l`` in
    ``0..L`` and ``contexts[l]`` ``[batch, tokens, heads_present * head_dim]`` for ``l`` in ``0..L-1``
    (detached, on the model's device)."""

    states: dict[int, torch.Tensor] = field(default_factory=dict)
    contexts: dict[int, torch.Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class Patch:
    """Replace ``site[where]`` by ``source``: ``where`` is a boolean mask ``[rows, tokens, width or 1]``
    and ``source`` a tensor ``[1, tokens, width]``; the result has the broadcast shape (a site of
    batch 1 becomes one row per patch)."""

    where: torch.Tensor
    source: torch.Tensor

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(self.where, self.source.to(x.dtype), x)


def _first(output: object, model: nn.Module) -> torch.Tensor:
    """The hidden states in a layer's output: the tensor itself, or the first item of a tuple
    (DeBERTa-v2, MPNet return ``(states, attention, ...)``)."""
    state = output[0] if isinstance(output, tuple) else output
    if not isinstance(state, torch.Tensor):
        raise ModelError(
            f"{type(model).__name__} ({architecture_for(model).model_type}): a layer returned "
            f"{type(output).__name__}, not hidden states (a tensor or a tuple starting with one); "
            "activation patching cannot reach this architecture's layers"
        )
    return state


def _pre_hook(fn: StateFn, model: nn.Module):
    def hook(module: nn.Module, args: tuple):
        if not args or not isinstance(args[0], torch.Tensor):
            raise ModelError(
                f"{type(model).__name__} ({architecture_for(model).model_type}): {type(module).__name__} "
                "was called without its input as the first positional argument; activation patching "
                "cannot reach this architecture's hidden states"
            )
        new = fn(args[0])
        return None if new is None else (new, *args[1:])

    return hook


def _post_hook(fn: StateFn, model: nn.Module):
    def hook(module: nn.Module, args: tuple, output: object):
        new = fn(_first(output, model))
        if new is None:
            return None
        return (new, *output[1:]) if isinstance(output, tuple) else new

    return hook


def _noop(module: nn.Module, *args: object) -> None:
    return None


def _install(model: nn.Module, states: dict[int, StateFn], contexts: dict[int, StateFn]) -> list:
    """Hooks calling ``states[l]`` on hidden state ``l`` and ``contexts[l]`` on layer ``l``'s head
    context (only where given); returns the handles."""
    layers = layer_modules(model)
    handles = []
    if 0 in states:
        first = _pre_hook(states[0], model)
        handles += install_position_hooks(model, layers, lambda p: first if p == 0 else _noop, pre=True)
    after = {l - 1: _post_hook(fn, model) for l, fn in states.items() if l >= 1}
    if after:
        handles += install_position_hooks(model, layers, lambda p: after.get(p, _noop), pre=False)
    if contexts:
        outputs = [block.output for block in attention_blocks(model)]
        before = {l: _pre_hook(fn, model) for l, fn in contexts.items()}
        handles += install_position_hooks(model, outputs, lambda p: before.get(p, _noop), pre=True)
    return handles


def _check_sites(model: nn.Module, states: dict, contexts: dict) -> None:
    n = len(layer_modules(model))
    bad = [f"state {l}" for l in states if not 0 <= l <= n] + [f"layer {l}" for l in contexts if not 0 <= l < n]
    if bad:
        raise ModelError(
            f"activation patching: {', '.join(bad)} out of range (hidden states 0..{n}, layers 0..{n - 1})"
        )


@contextmanager
def recording(model: nn.Module, *, heads: bool = True) -> Iterator[Activations]:
    """Within the block, every forward of ``model`` (base encoder or with a head) stores its hidden
    states (and, with ``heads``, head contexts) in the yielded :class:`Activations` (the last
    forward's)."""
    n = len(layer_modules(model))
    acts = Activations()

    def keep(store: dict[int, torch.Tensor], layer: int) -> StateFn:
        def fn(x: torch.Tensor) -> None:
            store[layer] = x.detach()

        return fn

    states = {l: keep(acts.states, l) for l in range(n + 1)}
    contexts = {l: keep(acts.contexts, l) for l in range(n)} if heads else {}
    handles = _install(model, states, contexts)
    try:
        yield acts
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def patching(model: nn.Module, states: dict[int, Patch], contexts: dict[int, Patch] | None = None) -> Iterator[None]:
    """Within the block, forwards of ``model`` have hidden state ``l`` replaced by ``states[l]`` and
    layer ``l``'s head context by ``contexts[l]`` (:class:`Patch`: where and by what)."""
    contexts = contexts or {}
    _check_sites(model, states, contexts)
    handles = _install(model, {l: p.apply for l, p in states.items()}, {l: p.apply for l, p in contexts.items()})
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def head_dim(model: nn.Module) -> int:
    """The width of one head's output (the attention module's head size)."""
    return attention_blocks(model)[0].head_dim


def head_layout(model: nn.Module) -> list[list[int]]:
    """Per layer, the original indices of the heads present, in the order of their slices in the head
    context (all heads unless the model was pruned by :func:`~bertology.probes.heads.gates.prune_heads`)."""
    return kept_heads(model)
