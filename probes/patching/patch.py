"""Causal (activation) patching for masked-language-model encoders: run a clean and a corrupted
sentence of the same token length, copy one activation of the clean run into the corrupted run, and
measure how much of the clean-vs-corrupted difference in the masked word's score comes back.

- score ``s = log P(target) - log P(foil)`` at the one mask token (e.g. ``is`` vs ``are``): the
  difference of the two vocabulary logits there (the softmax normaliser cancels);
- ``restored = (s_patched - s_corrupted) / (s_clean - s_corrupted)``: 0 = the patch changes
  nothing, 1 = it brings the clean score back entirely (:func:`restored_fraction`).

:func:`patch_hidden_states` patches one hidden state (the embeddings as layer 0, the output of layer
``l`` as layer ``l``) at one token position, every layer x position; :func:`patch_heads` one head's
output (its slice of the attention output projection's input) at every position or at one,
every layer x head (sites: :mod:`bertology.probes.patching.activations`). The patched runs are
batched: every row of a batch is the corrupted sentence with its own patch, so all positions of a
layer (and several layers) take one forward. Everything runs on the model's device.

The method follows Vig et al. 2020 (causal mediation analysis of subject-verb agreement), Meng et
al. 2022 (causal tracing: restore one clean state into a corrupted run) and Finlayson et al. 2021
(agreement through attractors); docs/METHODS.md, "Activation patching", says where it departs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from bertology.architectures import architecture_for, mlm_parts
from bertology.errors import ModelError, WorkbenchError
from bertology.features import model_max_tokens
from bertology.models import LoadedModel, model_device, to_device
from bertology.numbering import head_number, layer_number
from bertology.probes.patching.activations import Activations, Patch, head_dim, head_layout, patching, recording
from bertology.progress import progress_bar

__all__ = [
    "PatchingError",
    "EncodedPair",
    "encode_pair",
    "PairRun",
    "pair_scores",
    "hidden_state_scores",
    "head_scores",
    "restored_fraction",
    "patch_hidden_states",
    "patch_heads",
    "MODEL_INPUTS",
    "DIRECTIONS",
    "swapped",
]

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
MIN_DIFFERENCE = 1e-6  # |clean - corrupted| below this (nats): the restored fraction is undefined
DEFAULT_BATCH_ROWS = 256  # patched rows per forward (whole layers: all positions of a layer together)
# denoising: a clean activation into the corrupted run (the share of the difference it restores);
# noising: a corrupted activation into the clean run (the share it destroys; Vig et al. 2020)
DIRECTIONS = ("denoising", "noising")


class PatchingError(WorkbenchError):
    """A clean / corrupted pair that cannot be patched (lengths, mask token, multi-piece words) or
    a metric that is undefined (clean and corrupted scores equal)."""


@dataclass(frozen=True)
class EncodedPair:
    """A clean and a corrupted sentence tokenised for one model: ``clean`` / ``corrupted`` hold the
    model inputs ``[1, T]`` (on the CPU), ``mask_position`` the index of the one mask token in both,
    ``target_id`` / ``foil_id`` the vocabulary ids of the correct and the wrong word for the clean
    sentence; ``tokens_clean`` / ``tokens_corrupted`` the ``T`` token strings."""

    clean: dict[str, torch.Tensor]
    corrupted: dict[str, torch.Tensor]
    mask_position: int
    target_id: int
    foil_id: int
    tokens_clean: list[str]
    tokens_corrupted: list[str]

    @property
    def length(self) -> int:
        return len(self.tokens_clean)


def _single_token(tokenizer, word: str, what: str) -> int:
    ids = tokenizer(word, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        pieces = tokenizer.convert_ids_to_tokens(ids)
        raise PatchingError(f"{what} {word!r} is {len(ids)} tokens {pieces} for this tokenizer; it must be one")
    if ids[0] in tokenizer.all_special_ids:  # [UNK] (a word the vocabulary lacks) or another special token
        token = tokenizer.convert_ids_to_tokens(ids)[0]
        raise PatchingError(f"{what} {word!r} is the special token {token} for this tokenizer: not a word it can score")
    return int(ids[0])


def _encode(tokenizer, text: str) -> dict[str, torch.Tensor]:
    if tokenizer.mask_token and tokenizer.mask_token != "[MASK]":
        text = text.replace("[MASK]", tokenizer.mask_token)  # one spelling of the mask for every tokenizer
    enc = tokenizer(text, return_tensors="pt")
    return {k: v for k, v in enc.items() if k in MODEL_INPUTS}


def _mask_position(tokenizer, ids: torch.Tensor, text: str) -> int:
    where = (ids[0] == tokenizer.mask_token_id).nonzero().flatten().tolist()
    if len(where) != 1:
        raise PatchingError(
            f"{text!r}: {len(where)} mask tokens ({tokenizer.mask_token}); write exactly one where the word is scored"
        )
    return int(where[0])


def encode_pair(lm: LoadedModel, clean: str, corrupted: str, target: str, foil: str) -> EncodedPair:
    """Tokenise a pair: both sentences must have the same number of tokens and one mask token
    (written ``[MASK]`` or the tokenizer's own) at the same index; ``target`` (correct for
    ``clean``) and ``foil`` must be single tokens. Raises :class:`PatchingError` naming what
    differs."""
    tok = lm.tokenizer
    if tok.mask_token_id is None:
        raise ModelError(f"{lm.name}: the tokenizer has no mask token; patching scores a masked word")
    a, b = _encode(tok, clean), _encode(tok, corrupted)
    tokens_a = tok.convert_ids_to_tokens(a["input_ids"][0])
    tokens_b = tok.convert_ids_to_tokens(b["input_ids"][0])
    limit = model_max_tokens(lm.model, tok)
    for name, tokens in (("clean", tokens_a), ("corrupted", tokens_b)):
        if len(tokens) > limit:
            raise PatchingError(
                f"the {name} sentence has {len(tokens)} tokens; {lm.name} reads at most {limit}: shorten it"
            )
    if len(tokens_a) != len(tokens_b):
        raise PatchingError(
            f"clean and corrupted sentences must have the same token length: {len(tokens_a)} {tokens_a} "
            f"vs {len(tokens_b)} {tokens_b}"
        )
    position = _mask_position(tok, a["input_ids"], clean)
    if _mask_position(tok, b["input_ids"], corrupted) != position:
        raise PatchingError(f"the mask token is at token {position} of {clean!r} but elsewhere in {corrupted!r}")
    target_id, foil_id = _single_token(tok, target, "target"), _single_token(tok, foil, "foil")
    if target_id == foil_id:
        raise PatchingError(f"target {target!r} and foil {foil!r} are the same token")
    return EncodedPair(a, b, position, target_id, foil_id, tokens_a, tokens_b)


def swapped(pair: EncodedPair) -> EncodedPair:
    """The pair with its sentences exchanged (target and foil kept): patching it clean -> corrupted is
    *noising* the original pair, a corrupted activation copied into the clean run. Its restored
    fraction ``(patched - s_clean) / (s_corrupted - s_clean)`` is the share of the original
    difference that the corrupted activation destroys."""
    return EncodedPair(
        pair.corrupted,
        pair.clean,
        pair.mask_position,
        pair.target_id,
        pair.foil_id,
        pair.tokens_corrupted,
        pair.tokens_clean,
    )


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise PatchingError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")


def _mlm(lm: LoadedModel):
    """``(encoder, MLM head)``; :class:`ModelError` for a type outside :mod:`bertology.architectures`
    (its layers cannot be reached) or a model without an MLM head."""
    architecture_for(lm.model)  # names the type and the supported ones
    if not lm.has_mlm_head or lm.model is lm.encoder:
        raise ModelError(f"{lm.name}: patching scores the masked word: load_model(..., mlm_head=True)")
    encoder, head, _ = mlm_parts(lm.model)
    return encoder, head


@torch.no_grad()
def _scores(lm: LoadedModel, inputs: dict[str, torch.Tensor], pair: EncodedPair) -> torch.Tensor:
    """``logit[target] - logit[foil]`` at the mask token for each row of ``inputs`` ``[B, T]``:
    ``[B]`` on the model's device (the MLM head is position-wise: only the mask row is decoded)."""
    encoder, head = _mlm(lm)
    out = encoder(**to_device(inputs, model_device(lm.model)))
    hidden = out[0][:, pair.mask_position]  # [B, hidden]
    logits = head(hidden)  # [B, V]
    return logits[:, pair.target_id] - logits[:, pair.foil_id]


@dataclass(frozen=True)
class PairRun:
    """The unpatched runs of a pair (one batch, row 0 clean, row 1 corrupted): their scores and
    every activation (:class:`~bertology.probes.patching.activations.Activations`)."""

    clean_score: float
    corrupted_score: float
    acts: Activations

    @property
    def difference(self) -> float:
        return self.clean_score - self.corrupted_score


def pair_scores(lm: LoadedModel, pair: EncodedPair) -> PairRun:
    """Run the clean and the corrupted sentence (one batch) and keep their scores and activations."""
    both = {k: torch.cat([pair.clean[k], pair.corrupted[k]]) for k in pair.clean}
    with recording(_mlm(lm)[0]) as acts:
        scores = _scores(lm, both, pair).double().cpu().numpy()
    return PairRun(float(scores[0]), float(scores[1]), acts)


Site = tuple[int, int]  # (layer, position) of a hidden state, or (layer, slot) of a head present


def _chunks(sites: list[Site], batch_rows: int) -> list[list[Site]]:
    """The sites in forwards of at most ``batch_rows`` rows: whole layers (every position or head of a
    layer together, consecutive layers packed), a layer split only when it alone has more rows."""
    groups: dict[int, list[Site]] = {}
    for site in sites:
        groups.setdefault(site[0], []).append(site)
    size = max(1, batch_rows)
    chunks: list[list] = [[]]
    for group in groups.values():
        for piece in (group[i : i + size] for i in range(0, len(group), size)):
            if len(chunks[-1]) + len(piece) > size:
                chunks.append([])
            chunks[-1].extend(piece)
    return [chunk for chunk in chunks if chunk]


def _run_sites(
    lm: LoadedModel,
    pair: EncodedPair,
    sites: list[Site],
    make_patch,
    *,
    heads: bool,
    batch_rows: int,
    progress: bool = False,
) -> np.ndarray:
    """The corrupted run's score with each site's patch: ``[len(sites)]``, one batch row per site,
    whole layers per forward (:func:`_chunks`). ``make_patch(layer, index)`` gives the
    :class:`Patch` of a layer for ``index`` ``[rows]`` (each row's position or head slot in that
    layer, -1 in rows of other layers).

    The corrupted sentence enters as one row: the layers below a forward's first patched layer run
    once, and the batch grows to one row per site where that patch is applied (``torch.where``
    broadcasts the ``[1, T, width]`` activation against the ``[rows, T, width]`` mask; the residual
    sums and ``[1, ...]`` attention masks after it broadcast too). Packing whole layers rather than
    one layer per forward was faster for MiniLM-sized models on the CPU (fewer, larger matrix
    products); forwards split by ``batch_rows`` start at later layers and skip more.

    ``progress``: a bar over the sites (:func:`bertology.progress.progress_bar`) when they take more
    than one forward."""
    encoder = _mlm(lm)[0]
    out = np.empty(len(sites))
    done = 0
    chunks = _chunks(sites, batch_rows)
    bar = progress_bar(
        total=len(sites),
        desc="patching heads" if heads else "patching hidden states",
        unit="site",
        enabled=progress and len(chunks) > 1,
    )
    for chunk in chunks:
        patches = {}
        for layer in sorted({site[0] for site in chunk}):
            index = torch.tensor([s[1] if s[0] == layer else -1 for s in chunk], device=model_device(encoder))
            patches[layer] = make_patch(layer, index)
        with patching(encoder, {} if heads else patches, patches if heads else None):
            scores = _scores(lm, pair.corrupted, pair)
        if scores.shape[0] != len(chunk):
            raise ModelError(
                f"{type(encoder).__name__}: a patched forward returned {scores.shape[0]} rows for {len(chunk)} patches"
            )
        out[done : done + len(chunk)] = scores.double().cpu().numpy()
        done += len(chunk)
        bar.update(len(chunk))
    bar.close()
    return out


def hidden_state_scores(
    lm: LoadedModel,
    pair: EncodedPair,
    run: PairRun,
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    skip_unchanged: bool = True,
    progress: bool = False,
) -> np.ndarray:
    """The corrupted run's score with hidden state ``l`` at position ``p`` taken from the clean run:
    ``[L + 1, T]`` (layer 0 = embeddings; ``run``: :func:`pair_scores`). One batch row per (layer, position), all positions of a layer side by side;
    with ``skip_unchanged``, a site whose clean and corrupted states are equal (at layer 0 every token
    the two sentences share) is not run: its patch changes nothing, its score is the corrupted score.
    ``progress``: a bar over the sites when they take more than one forward."""
    states = run.acts.states
    differs = torch.stack([(states[l][0] != states[l][1]).any(-1) for l in range(len(states))]).cpu()
    if not skip_unchanged:
        differs = torch.ones_like(differs)
    sites = [(int(l), int(p)) for l, p in differs.nonzero().tolist()]
    tokens = torch.arange(pair.length, device=states[0].device)

    def make_patch(layer: int, index: torch.Tensor) -> Patch:
        return Patch(tokens[None, :, None] == index[:, None, None], states[layer][:1])  # [rows, T, 1]

    out = np.full(differs.shape, np.nan)
    out[~differs.numpy()] = run.corrupted_score
    if sites:
        out[tuple(np.array(sites).T)] = _run_sites(
            lm, pair, sites, make_patch, heads=False, batch_rows=batch_rows, progress=progress
        )
    return out


def head_scores(
    lm: LoadedModel,
    pair: EncodedPair,
    run: PairRun,
    *,
    position: int | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    progress: bool = False,
) -> np.ndarray:
    """The corrupted run's score with head ``(l, h)``'s output taken from the clean run (``run``:
    :func:`pair_scores`) at every token (``position=None``) or at one: ``[L, H]`` (original head numbering; NaN
    for heads a pruned model lacks). One batch row per head, the heads of a layer side by side.
    ``progress``: a bar over the heads when they take more than one forward."""
    layout, d, acts = head_layout(lm.encoder), head_dim(lm.encoder), run.acts
    if position is not None and not 0 <= position < pair.length:
        raise PatchingError(f"position {position} is outside the {pair.length} tokens of the pair")
    device = acts.contexts[0].device
    tokens = torch.arange(pair.length, device=device)
    at = tokens >= 0 if position is None else tokens == position  # [T]

    def make_patch(layer: int, index: torch.Tensor) -> Patch:
        columns = torch.arange(acts.contexts[layer].shape[-1], device=device) // d  # slot of each column
        where = (columns[None, None, :] == index[:, None, None]) & at[None, :, None]  # [rows, T, width]
        return Patch(where, acts.contexts[layer][:1])

    sites = [(layer, slot) for layer, heads in enumerate(layout) for slot in range(len(heads))]
    scores = _run_sites(lm, pair, sites, make_patch, heads=True, batch_rows=batch_rows, progress=progress)
    out = np.full((len(layout), lm.num_heads), np.nan)
    for (layer, slot), score in zip(sites, scores):
        out[layer, layout[layer][slot]] = score
    return out


def restored_fraction(patched, clean: float, corrupted: float, *, min_difference: float = MIN_DIFFERENCE) -> np.ndarray:
    """``(patched - corrupted) / (clean - corrupted)`` elementwise (``patched``: any shape). Raises
    :class:`PatchingError` when ``|clean - corrupted| < min_difference`` (nats): with no difference
    to restore, the fraction is undefined."""
    difference = float(clean) - float(corrupted)
    if not np.isfinite(difference) or abs(difference) < min_difference:
        raise PatchingError(
            f"clean score {clean:.6g} and corrupted score {corrupted:.6g} differ by {abs(difference):.3g} "
            f"(< {min_difference:g} nats): there is no difference for a patch to restore"
        )
    return (np.asarray(patched, dtype=float) - float(corrupted)) / difference


def _prepare(lm: LoadedModel, clean: str, corrupted: str, target: str, foil: str, direction: str):
    """The pair as patched (exchanged for ``noising``: :func:`swapped`) and its unpatched run; the run's
    ``clean_score`` is the score of the run patched from, ``corrupted_score`` of the run patched into."""
    _check_direction(direction)
    pair = encode_pair(lm, clean, corrupted, target, foil)
    if direction == "noising":
        pair = swapped(pair)
    run = pair_scores(lm, pair)
    restored_fraction(0.0, run.clean_score, run.corrupted_score)  # refuse an undefined metric before patching
    return pair, run


def _frame(columns: dict, pair: EncodedPair, run: PairRun, scores: np.ndarray, direction: str) -> pd.DataFrame:
    """The result table: the original pair's ``clean_score`` / ``corrupted_score`` whatever the
    direction, and ``restored`` = the share of their difference the patch restores (denoising) or
    destroys (noising)."""
    clean, corrupted = (run.clean_score, run.corrupted_score)
    if direction == "noising":
        clean, corrupted = corrupted, clean
    return pd.DataFrame(
        {
            **columns,
            "score": scores.ravel(),
            "clean_score": clean,
            "corrupted_score": corrupted,
            "direction": direction,
            "restored": restored_fraction(scores, run.clean_score, run.corrupted_score).ravel(),
        }
    )


def patch_hidden_states(
    lm: LoadedModel,
    clean: str,
    corrupted: str,
    target: str,
    foil: str,
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    direction: str = "denoising",
) -> pd.DataFrame:
    """Patch every hidden state ``[L + 1 layers, T positions]`` of the clean run, one (layer, position)
    at a time, into the corrupted run (layer 0 = the embeddings; ``lm`` loaded with ``mlm_head=True``).

    ``clean`` / ``corrupted``: sentences of equal token length with one ``[MASK]`` at the same token;
    ``target`` / ``foil``: single-token words, ``target`` correct for ``clean`` (e.g. ``"is"``,
    ``"are"``). Returns ``(L + 1) * T`` rows: ``layer, position, token, token_corrupted, score,
    clean_score, corrupted_score, direction, restored`` (``score``: log P(target) - log P(foil) of the
    patched run; ``restored``: :func:`restored_fraction`). ``direction``: ``denoising`` (a clean state
    into the corrupted run; ``restored`` = the share of the difference it brings back) or ``noising``
    (a corrupted state into the clean run; ``restored`` = the share it destroys). Raises
    :class:`PatchingError` when the scores of the two sentences are equal."""
    pair, run = _prepare(lm, clean, corrupted, target, foil, direction)
    scores = hidden_state_scores(lm, pair, run, batch_rows=batch_rows, progress=True)
    layers, positions = np.indices(scores.shape)
    tokens = (pair.tokens_clean, pair.tokens_corrupted)[:: -1 if direction == "noising" else 1]
    columns = {
        "layer": layers.ravel(),
        "position": positions.ravel(),
        "token": np.asarray(tokens[0])[positions.ravel()],
        "token_corrupted": np.asarray(tokens[1])[positions.ravel()],
    }
    return _frame(columns, pair, run, scores, direction)


def patch_heads(
    lm: LoadedModel,
    clean: str,
    corrupted: str,
    target: str,
    foil: str,
    *,
    position: int | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    direction: str = "denoising",
) -> pd.DataFrame:
    """Patch every head's output ``[L layers, H heads]`` of the clean run, one head at a time, into the
    corrupted run: at every token (``position=None``) or at token ``position`` only. Inputs as for
    :func:`patch_hidden_states`. Returns ``L * H`` rows: ``layer, head, position`` (NA = every
    token), ``score, clean_score, corrupted_score, direction, restored`` (``direction`` as for
    :func:`patch_hidden_states`)."""
    pair, run = _prepare(lm, clean, corrupted, target, foil, direction)
    scores = head_scores(lm, pair, run, position=position, batch_rows=batch_rows, progress=True)
    layers, heads = np.indices(scores.shape)
    columns = {
        "layer": layer_number(layers.ravel()),  # transformer layers 1..L, heads 1..H (bertology.numbering)
        "head": head_number(heads.ravel()),
        "position": pd.array([position] * scores.size, dtype="Int64"),
    }
    return _frame(columns, pair, run, scores, direction)
