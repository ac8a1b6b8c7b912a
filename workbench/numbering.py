"""The one layer and head numbering of everything a person reads (issue 54, item 2).

Tables (the ``layer`` / ``head`` columns of every result table), figures, CLI output, study
summaries, the dashboard and the docs number layers and heads as the papers do: layer 0 is the
embeddings and the transformer layers are 1..L (Tenney et al. 2019; hidden state l is the output of
transformer layer l, Hugging Face's ``hidden_states[l]``); a layer's heads are 1..H (Clark et al.'s
"head 8-10", Michel et al. 2019, Voita et al. 2019). The same number means the same layer in a
probing table and a head table.

Python arrays stay indexed from 0: ``[layers, heads]`` tensors and masks, a store's attention
``[layers, heads, words, words]``, the ``(layer, head)`` index pairs functions take and return.
Transformer layer ``l`` and head ``h`` are ``array[l - 1, h - 1]``. The conversion happens once,
where a labelled table, figure or printout is made (:func:`layer_number`, :func:`head_number`), and
back where a person's number names an array entry (:func:`layer_index`, :func:`head_index`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, overload

import numpy as np

from bertology.errors import ConfigError, WorkbenchError

NUMBERING = "layers-from-1"
"""The manifest's ``numbering`` field of runs whose tables follow this module. Runs without it were
written before (a head's or an attention map's layer, and heads, counted from 0)."""

STATEMENT = (
    "Numbering: layer 0 is the embeddings and the transformer layers are 1..L (hidden state l is the output of "
    "transformer layer l); a layer's heads are 1..H. Head 8-10 is the tenth head of layer 8, as in the papers."
)
"""The one statement of the numbering, shown under each dashboard page's title and in the docs."""


@overload
def layer_number(index: int) -> int: ...
@overload
def layer_number(index: np.ndarray) -> np.ndarray: ...
def layer_number(index: Any) -> Any:
    """The displayed number of transformer layer ``index`` (0-based, as ``attentions[index]``):
    ``index + 1``. Works on an int or an integer array."""
    return index + 1


@overload
def head_number(index: int) -> int: ...
@overload
def head_number(index: np.ndarray) -> np.ndarray: ...
def head_number(index: Any) -> Any:
    """The displayed number of head ``index`` (0-based, as ``attentions[:, index]``): ``index + 1``."""
    return index + 1


def head_name(layer_index: int, head_index: int) -> str:
    """``"<layer>-<head>"`` of the head at 0-based array position ``(layer_index, head_index)``,
    Clark et al.'s form: ``head_name(0, 2) == "1-3"``."""
    return f"{layer_number(int(layer_index))}-{head_number(int(head_index))}"


@overload
def to_index(number: int) -> int: ...
@overload
def to_index(number: np.ndarray) -> np.ndarray: ...
def to_index(number: Any) -> Any:
    """The 0-based array index of a table's layer or head number (an int or an integer array):
    ``number - 1``. No range check: for numbers a table made (:func:`layer_index` checks a person's)."""
    return number - 1


def head_numbers(pairs: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``(layer, head)`` numbers of 0-based ``(layer_index, head_index)`` pairs, for a table."""
    return [(layer_number(int(layer)), head_number(int(head))) for layer, head in pairs]


def head_indices(pairs: Iterable[tuple[Any, Any]]) -> list[tuple[int, int]]:
    """0-based ``(layer_index, head_index)`` pairs of ``(layer, head)`` numbers read from a table
    (e.g. ``zip(table["layer"], table["head"])``); a WorkbenchError for a number below 1 (a table
    that counts from 0, written before this numbering)."""
    out = [(to_index(int(layer)), to_index(int(head))) for layer, head in pairs]
    bad = [(layer + 1, head + 1) for layer, head in out if layer < 0 or head < 0]
    if bad:
        raise WorkbenchError(
            f"head {bad[0][0]}-{bad[0][1]}: layers and heads are numbered from 1 in tables "
            "(a table counting from 0 predates bertology.numbering; re-run it)"
        )
    return out


def layer_index(number: int, n_layers: int, what: str = "layer") -> int:
    """The 0-based array index of transformer layer ``number`` (1..n_layers); a ConfigError naming
    ``what`` and the valid range otherwise."""
    if not 1 <= int(number) <= n_layers:
        raise ConfigError(f"{what} {number} is out of range: transformer layers are 1..{n_layers} (0 = embeddings)")
    return int(number) - 1


def head_index(number: int, n_heads: int, what: str = "head") -> int:
    """The 0-based array index of head ``number`` (1..n_heads); a ConfigError otherwise."""
    if not 1 <= int(number) <= n_heads:
        raise ConfigError(f"{what} {number} is out of range: heads are 1..{n_heads}")
    return int(number) - 1


def is_current(manifest: dict[str, Any]) -> bool:
    """Whether a run's manifest says its tables follow :data:`NUMBERING`."""
    return manifest.get("numbering") == NUMBERING
