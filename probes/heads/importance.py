"""Head importance (Michel et al. 2019): I_h = E_x |∂L(x)/∂ξ_h| at gates ξ = 1.

All heads at once from ONE backward pass per batch: each example gets its own copy of the gates
(``[batch, layers, heads]``), so the gradient of the summed loss w.r.t. an example's gates is that
example's ∂L(x)/∂ξ, and the absolute value is taken per example as in the paper. Compared with
brute-force ablation (loss increase when one head is gated to 0: layers × heads + 1 forwards).

Losses (``loss_fn(model, batch) -> per-example losses [batch]``):
- :func:`mlm_loss` on batches from :func:`mask_batches` (models with an MLM head);
- :func:`TaggingHead` cross-entropy (a linear probe on the last layer trained with the encoder
  frozen, e.g. on POS) for encoders without an MLM head, such as the real MiniLM.

Devices: everything runs where the model's parameters are. Batches may be CPU tensors: they are
moved to the model's device where they enter it (:func:`bertology.models.to_device`; the loops here
move each batch before calling ``loss_fn``, and the losses of this module move it too), gates are
made there, and results come back to the CPU before they become numpy arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import pandas as pd
import torch
from torch import nn

from bertology.architectures import mlm_parts
from bertology.errors import ModelError, WorkbenchError
from bertology.models import model_device, to_device
from bertology.numbering import head_number, layer_number
from bertology.probes.heads.gates import HeadGates, head_shape, ones_gates

Batch = dict[str, torch.Tensor]
LossFn = Callable[[nn.Module, Batch], torch.Tensor]
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def model_inputs(batch: Batch) -> Batch:
    return {k: v for k, v in batch.items() if k in MODEL_INPUTS}


@contextmanager
def frozen(model: nn.Module) -> Iterator[nn.Module]:
    """Parameters without grad (gate gradients only: skips the weight-gradient work)."""
    flags = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        yield model
    finally:
        for p, flag in zip(model.parameters(), flags):
            p.requires_grad_(flag)


def _per_example(losses: torch.Tensor, batch_size: int) -> torch.Tensor:
    if losses.dim() == 0:
        raise WorkbenchError("loss_fn must return per-example losses [batch] for importance scores")
    if losses.shape[0] != batch_size:
        raise WorkbenchError(f"loss_fn returned {tuple(losses.shape)}, expected [{batch_size}]")
    return losses


def normalise_per_layer(scores: np.ndarray) -> np.ndarray:
    """Divide each layer's ``[heads]`` scores by their ℓ2 norm (Michel et al.)."""
    norm = np.linalg.norm(scores, axis=-1, keepdims=True)
    return scores / np.where(norm > 0, norm, 1.0)


def _table(scores: np.ndarray, raw: np.ndarray, method: str) -> pd.DataFrame:
    layers, heads = np.indices(scores.shape)
    return pd.DataFrame(
        {
            "layer": layer_number(layers.ravel()),
            "head": head_number(heads.ravel()),
            "importance": scores.ravel(),
            "importance_raw": raw.ravel(),
            "method": method,
        }
    )


def importance_scores(
    model: nn.Module,
    batches: Iterable[Batch],
    loss_fn: LossFn,
    normalise: bool = True,
    base_gates: torch.Tensor | None = None,
) -> pd.DataFrame:
    """Gradient importance of every head, one backward pass per batch.

    base_gates: ``[layers, heads]`` gates the model runs with (1 = on; heads at 0 stay off and
    score 0), default all ones. Returns ``layer, head, importance, importance_raw, method``
    (``importance`` normalised per layer when ``normalise``).
    """
    n_layers, n_heads = head_shape(model)
    base = torch.ones(n_layers, n_heads) if base_gates is None else base_gates.detach().float().cpu()
    was_training = model.training
    model.eval()
    with frozen(model), HeadGates(model) as gates:
        mean = _mean_gate_gradients(model, batches, loss_fn, gates, base, "importance_scores")
    model.train(was_training)
    raw = mean.numpy() * base.numpy()
    return _table(normalise_per_layer(raw) if normalise else raw, raw, "gradient")


def _mean_gate_gradients(
    model: nn.Module, batches: Iterable[Batch], loss_fn: LossFn, gates, base: torch.Tensor, caller: str
) -> torch.Tensor:
    """``E_x |∂L(x)/∂ξ|`` (float64 on the CPU, ``base``'s shape) for the installed gates object
    ``gates`` (:class:`HeadGates` or :class:`FFNGates`) at ``base``: each example gets its own copy of
    the gates, so one backward pass per batch gives every example's gradient. The gates are made on
    the model's device and each batch is moved there."""
    device = model_device(model)
    on_device = base.to(device)
    total = torch.zeros(base.shape, dtype=torch.float64)
    count = 0
    for batch in batches:
        batch = to_device(batch, device)
        size = batch["input_ids"].shape[0]
        g = on_device.expand(size, *base.shape).clone().requires_grad_(True)
        gates.gates = g
        losses = _per_example(loss_fn(model, batch), size)
        (grad,) = torch.autograd.grad(losses.sum(), g)
        total += grad.detach().abs().sum(0).double().cpu()
        count += size
    if count == 0:
        raise WorkbenchError(f"{caller}: no batches")
    return total / count


def ffn_importance_scores(
    model: nn.Module,
    batches: Iterable[Batch],
    loss_fn: LossFn,
    normalise: bool = True,
    base_gates: torch.Tensor | None = None,
) -> pd.DataFrame:
    """Gradient importance of every layer's feed-forward block (Prasanna et al. 2020's MLP importance,
    Michel et al.'s estimator): ``I_l = E_x |∂L(x)/∂ξ_l|`` with a gate ``ξ_l`` on the block's output
    (:class:`~bertology.probes.heads.gates.FFNGates`), one backward pass per batch (per-example gates).

    ``base_gates``: ``[layers]`` the model runs with (blocks at 0 stay off and score 0). Returns
    ``layer, importance, importance_raw, method`` (``importance`` divided by the ℓ2 norm over layers
    when ``normalise``)."""
    from bertology.probes.heads.gates import FFNGates

    was_training = model.training
    model.eval()
    with frozen(model), FFNGates(model) as gates:
        n_layers = len(gates.modules)
        base = torch.ones(n_layers) if base_gates is None else base_gates.detach().float().cpu()
        mean = _mean_gate_gradients(model, batches, loss_fn, gates, base, "ffn_importance_scores")
    model.train(was_training)
    raw = mean.numpy() * base.numpy()
    norm = np.linalg.norm(raw)
    scores = raw / norm if normalise and norm > 0 else raw
    return pd.DataFrame(
        {"layer": layer_number(np.arange(n_layers)), "importance": scores, "importance_raw": raw, "method": "gradient"}
    )


@torch.no_grad()
def example_losses(
    model: nn.Module, batches: Sequence[Batch], loss_fn: LossFn, gates: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-example losses ``[examples]`` (on the model's device) with the model run under ``gates``
    ``[layers, heads]``; each batch is moved to the model's device first."""
    device = model_device(model)
    with HeadGates(model, gates) if gates is not None else _null():
        return torch.cat([loss_fn(model, to_device(batch, device)).detach().flatten() for batch in batches])


def mean_loss(model: nn.Module, batches: Sequence[Batch], loss_fn: LossFn, gates: torch.Tensor | None = None) -> float:
    """Mean per-example loss with the model run under ``gates`` ``[layers, heads]`` (None = all on)."""
    return float(example_losses(model, batches, loss_fn, gates).mean())


@contextmanager
def _null():
    yield None


def ablation_importance(
    model: nn.Module, batches: Sequence[Batch], loss_fn: LossFn, normalise: bool = False
) -> pd.DataFrame:
    """Brute force: gate each head alone to 0 (layers × heads + 1 forward passes over the data).

    ``importance`` = E_x |L(x; ξ_h = 0) − L(x)| (the quantity Michel's first-order I_h
    approximates), ``loss_increase`` = E_x [L(x; ξ_h = 0) − L(x)]. Returns ``layer, head,
    importance, importance_raw, loss_increase, method``.
    """
    batches = list(batches)
    n_layers, n_heads = head_shape(model)
    was_training = model.training
    model.eval()
    base = example_losses(model, batches, loss_fn)
    raw = np.zeros((n_layers, n_heads))
    increase = np.zeros((n_layers, n_heads))
    for layer in range(n_layers):
        for head in range(n_heads):
            gates = ones_gates(model, n_layers, n_heads)
            gates[layer, head] = 0.0
            delta = (example_losses(model, batches, loss_fn, gates) - base).double()
            raw[layer, head] = float(delta.abs().mean())
            increase[layer, head] = float(delta.mean())
    model.train(was_training)
    table = _table(normalise_per_layer(raw) if normalise else raw, raw, "ablation")
    table.insert(4, "loss_increase", increase.ravel())
    return table


# ---------------------------------------------------------------- MLM loss


def mask_batches(
    batches: Iterable[Batch],
    mask_token_id: int,
    vocab_size: int,
    special_token_ids: Sequence[int] = (),
    probability: float = 0.15,
    seed: int = 0,
) -> list[Batch]:
    """BERT masking with a seeded generator, fixed once (so every pass sees the same masks).

    15% of non-special, non-padding positions chosen (at least one per example); of those 80% ->
    [MASK], 10% -> random token, 10% unchanged. Adds ``labels`` (-100 = not scored).
    """
    gen = torch.Generator().manual_seed(seed)
    out = []
    for batch in batches:
        ids = batch["input_ids"].clone()
        candidates = torch.ones_like(ids, dtype=torch.bool)
        if "attention_mask" in batch:
            candidates &= batch["attention_mask"].bool()
        for sid in special_token_ids:
            candidates &= ids != sid
        chosen = (torch.rand(ids.shape, generator=gen) < probability) & candidates
        for row in range(ids.shape[0]):  # at least one scored position per example
            if not chosen[row].any() and candidates[row].any():
                options = candidates[row].nonzero().flatten()
                chosen[row, options[torch.randint(len(options), (1,), generator=gen)]] = True
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        r = torch.rand(ids.shape, generator=gen)
        ids = torch.where(chosen & (r < 0.8), torch.full_like(ids, mask_token_id), ids)
        random_tokens = torch.randint(vocab_size, ids.shape, generator=gen)
        ids = torch.where(chosen & (r >= 0.8) & (r < 0.9), random_tokens, ids)
        out.append({**batch, "input_ids": ids, "labels": labels})
    return out


def token_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-example mean cross-entropy over scored tokens: logits [B, T, C], labels [B, T]."""
    ce = nn.functional.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100, reduction="none")
    scored = (labels != -100).sum(-1).clamp(min=1)
    return ce.sum(-1) / scored


def mlm_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Per-example MLM loss ``[batch]`` (mean cross-entropy over each example's scored tokens) of a
    ``*ForMaskedLM`` model on :func:`mask_batches` output.

    Where the MLM head's layout is known (every architecture of the table:
    :func:`bertology.architectures.mlm_parts`) the vocabulary logits are computed at the scored
    positions only (~15% of tokens), as pretraining does; the loss is the same as from the full
    logits up to float rounding. Other models: the full logits. The batch is moved to the model's
    device."""
    batch = to_device(batch, model_device(model))
    labels = batch["labels"]
    try:
        encoder, head, _ = mlm_parts(model)
    except ModelError:
        return token_cross_entropy(model(**model_inputs(batch)).logits, labels)
    hidden = encoder(**model_inputs(batch))[0]  # [B, T, D]
    scored = labels != -100
    ce = nn.functional.cross_entropy(head(hidden[scored]).float(), labels[scored], reduction="none")  # [n]
    example = scored.nonzero()[:, 0]
    total = torch.zeros(labels.shape[0], dtype=ce.dtype, device=ce.device).index_add(0, example, ce)
    return total / scored.sum(-1).clamp(min=1)


# ---------------------------------------------------------------- token-classification task head


def tagging_batches(
    tokenizer,
    sentences: Sequence,
    labels: Sequence[Sequence[str]],
    label_index: dict[str, int],
    batch_size: int = 16,
    max_length: int = 128,
) -> list[Batch]:
    """Tokenise word lists; ``labels`` on the first piece of each word, -100 elsewhere."""
    batches = []
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start : start + batch_size]
        words = [list(getattr(s, "words", s)) for s in chunk]
        enc = tokenizer(
            words, is_split_into_words=True, truncation=True, max_length=max_length, padding=True, return_tensors="pt"
        )
        lab = torch.full(enc["input_ids"].shape, -100, dtype=torch.long)
        for row, tags in enumerate(labels[start : start + batch_size]):
            previous = None
            for pos, word_id in enumerate(enc.word_ids(row)):
                if word_id is not None and word_id != previous:
                    if tags[word_id] not in label_index:
                        raise WorkbenchError(f"sentence {start + row}: label {tags[word_id]!r} not in label set")
                    lab[row, pos] = label_index[tags[word_id]]
                previous = word_id
        batches.append({k: v for k, v in enc.items() if k in MODEL_INPUTS} | {"labels": lab})
    return batches


def encoder_output(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Last hidden layer ``[batch, tokens, dim]`` of the base encoder (the batch moved to its device)."""
    base = getattr(model, "base_model", model)
    return base(**to_device(model_inputs(batch), model_device(model))).last_hidden_state


class TaggingHead(nn.Module):
    """Linear token classifier on the encoder's last layer; ``loss(model, batch) -> [batch]``. The
    head lives on the encoder's device (:func:`train_tagging_head` puts it there); batches are moved
    there."""

    def __init__(self, dim: int, n_labels: int):
        super().__init__()
        self.linear = nn.Linear(dim, n_labels)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        batch = to_device(batch, model_device(model))
        return token_cross_entropy(self(encoder_output(model, batch)), batch["labels"])

    @torch.no_grad()
    def accuracy(self, model: nn.Module, batches: Iterable[Batch], gates: torch.Tensor | None = None) -> float:
        correct = total = 0
        device = model_device(model)
        with HeadGates(model, gates) if gates is not None else _null():
            for batch in batches:
                batch = to_device(batch, device)
                pred = self(encoder_output(model, batch)).argmax(-1)
                scored = batch["labels"] != -100
                correct += int((pred[scored] == batch["labels"][scored]).sum())
                total += int(scored.sum())
        return correct / max(total, 1)

    @torch.no_grad()
    def sentence_scores(
        self, model: nn.Module, batches: Iterable[Batch], gates: torch.Tensor | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(correct, scored)`` per sentence ``[sentences]``, in batch order: accuracy is
        ``correct.sum() / scored.sum()``, and a bootstrap over sentences resamples these pairs."""
        correct, scored_n = [], []
        device = model_device(model)
        with HeadGates(model, gates) if gates is not None else _null():
            for batch in batches:
                batch = to_device(batch, device)
                pred = self(encoder_output(model, batch)).argmax(-1)
                scored = batch["labels"] != -100
                correct.append(((pred == batch["labels"]) & scored).sum(-1).cpu().numpy())
                scored_n.append(scored.sum(-1).cpu().numpy())
        return np.concatenate(correct).astype(float), np.concatenate(scored_n).astype(float)


def train_tagging_head(
    model: nn.Module, batches: Sequence[Batch], n_labels: int, *, epochs: int = 30, lr: float = 1e-2, seed: int = 0
) -> TaggingHead:
    """Fit a :class:`TaggingHead` with the encoder frozen (its last layer computed once), on the
    encoder's device (initialised on the CPU first, so every device starts from the same weights)."""
    torch.manual_seed(seed)
    device = model_device(model)
    with torch.no_grad():
        cached = [(encoder_output(model, b), b["labels"].to(device)) for b in batches]
    head = TaggingHead(cached[0][0].shape[-1], n_labels).to(device)
    opt = torch.optim.Adam(head.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for i in torch.randperm(len(cached), generator=gen).tolist():
            hidden, labels = cached[i]
            loss = token_cross_entropy(head(hidden), labels).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    head.eval()
    for p in head.parameters():
        p.requires_grad_(False)
    return head
