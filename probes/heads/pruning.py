"""Head pruning: curves (Michel et al. 2019), real removal, and L0 / Hard Concrete gates (Voita et al.
2019, Louizos et al. 2018).

- :func:`pruning_curve`: metric vs share of heads removed, ``step`` (10%) of all heads at a time, in
  order of gradient importance (re-scored after each step), random order (per seed) or head type
  (unspecialised heads first, specialised last). Heads are switched off with gates.
- :func:`measure_pruning`: really remove heads; report parameters and measured inference time.
- :class:`HardConcreteGates` / :func:`train_l0_gates`: stochastic gates per head with
  loss = task loss + λ Σ P(gate ≠ 0); the encoder stays frozen, only ``log_alpha`` is learned.
"""

from __future__ import annotations

import ast

import copy
import math
import time
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch
from torch import nn

from bertology.probes.heads.gates import HeadGates, count_parameters, head_shape, prune_heads
from bertology.probes.heads.importance import Batch, LossFn, frozen, importance_scores, model_inputs
from bertology.errors import WorkbenchError

MetricFn = Callable[[nn.Module, torch.Tensor], float]  # (model, gates [L, H]) -> metric
TYPE_PRUNE_ORDER = ("other", "broad", "special", "rare-token", "syntactic", "positional")


def _steps(n_heads: int, step: float) -> list[int]:
    per = max(1, int(round(step * n_heads)))
    return list(range(0, n_heads + 1, per)) + ([n_heads] if n_heads % per else [])


def pruning_curve(model: nn.Module, metric_fn: MetricFn, *, method: str = "importance",
                  batches: Sequence[Batch] | None = None, loss_fn: LossFn | None = None,
                  step: float = 0.1, seeds: Sequence[int] = (0,), head_types: pd.DataFrame | None = None,
                  max_share: float = 1.0) -> pd.DataFrame:
    """Metric as heads are removed ``step`` × all heads at a time.

    method: ``importance`` (needs ``batches`` and ``loss_fn``; importance re-scored with the
    current gates after each step), ``random`` (one curve per seed) or ``type`` (needs
    ``head_types`` from :func:`bertology.probes.heads.head_types.classify_heads`; within a type, lowest confidence first,
    ties by seed). Returns ``method, seed, n_pruned, share_pruned, metric, pruned`` (``pruned``: the
    ``(layer, head)`` list removed so far, as a string).
    """
    n_layers, n_heads = head_shape(model)
    total = n_layers * n_heads
    counts = [c for c in _steps(total, step) if c <= max_share * total + 1e-9]
    rows = []
    for seed in (seeds if method in ("random", "type") else seeds[:1]):
        gates = torch.ones(n_layers, n_heads)
        pruned: list[tuple[int, int]] = []
        order: list[tuple[int, int]] = []
        if method == "random":
            perm = np.random.default_rng(seed).permutation(total)
            order = [(int(i) // n_heads, int(i) % n_heads) for i in perm]
        elif method == "type":
            if head_types is None:
                raise WorkbenchError("pruning_curve(method='type') needs head_types")
            rng = np.random.default_rng(seed)
            t = head_types.assign(_tie=rng.random(len(head_types)),
                                  _rank=head_types["type"].map({k: i for i, k in enumerate(TYPE_PRUNE_ORDER)}))
            t = t.sort_values(["_rank", "confidence", "_tie"])
            order = [(int(r.layer), int(r.head)) for r in t.itertuples()]
        elif method != "importance":
            raise WorkbenchError(f"pruning_curve: unknown method {method!r} (importance, random, type)")
        elif batches is None or loss_fn is None:
            raise WorkbenchError("pruning_curve(method='importance') needs batches and loss_fn")
        for count in counts:
            while len(pruned) < count:
                if method == "importance":
                    scores = importance_scores(model, batches, loss_fn, normalise=True, base_gates=gates)
                    scores = scores[[(int(l), int(h)) not in set(pruned)
                                     for l, h in zip(scores["layer"], scores["head"])]]
                    chosen = scores.sort_values("importance").head(count - len(pruned))
                    new = [(int(l), int(h)) for l, h in zip(chosen["layer"], chosen["head"])]
                else:
                    new = order[len(pruned):count]
                for layer, head in new:
                    gates[layer, head] = 0.0
                pruned.extend(new)
            rows.append({"method": method, "seed": seed, "n_pruned": count, "share_pruned": count / total,
                         "metric": float(metric_fn(model, gates.clone())), "pruned": str(sorted(pruned))})
    return pd.DataFrame(rows)


def heads_pruned_at(curve: pd.DataFrame, share: float, share_column: str = "share_pruned") -> tuple[pd.Series, list[tuple[int, int]]]:
    """The curve row nearest ``share`` of heads removed and its ``(layer, head)`` list (the ``pruned``
    column is stored as a string so the table stays plain parquet)."""
    row = curve.iloc[(curve[share_column] - share).abs().argmin()]
    return row, [(int(l), int(h)) for l, h in ast.literal_eval(row["pruned"])]


def removable_shares(curve: pd.DataFrame, tolerances: Sequence[float] = (0.01, 0.05), *,
                     share_column: str = "share_pruned", value_column: str = "metric") -> pd.DataFrame:
    """How many heads can go before the metric worsens by each relative ``tolerance`` (Michel et al.'s
    question: "what share of heads can be removed before a noticeable drop?").

    ``curve``: rows of :func:`pruning_curve` (higher metric = better; for a loss the metric is minus
    the loss, so a 1% rise of the loss is a 1% relative drop of the metric). Per ``method, seed``:
    the relative degradation at each step is ``(base - value) / |base|`` with ``base`` the metric with
    no head removed; the removable share is the largest share reached before the degradation first
    exceeds the tolerance. Returns ``method, seed, tolerance, removable_share, n_removable, base, value``
    (``value``: the metric at that share).
    """
    rows = []
    for (method, seed), g in curve.sort_values(share_column).groupby(["method", "seed"], sort=False):
        start = g[g[share_column] == 0]
        if start.empty:
            raise WorkbenchError(f"pruning curve {method}/{seed}: no point with no head removed")
        base = float(start[value_column].iloc[0])
        degradation = (base - g[value_column].to_numpy()) / max(abs(base), 1e-12)
        for tol in tolerances:
            over = np.flatnonzero(degradation > tol)
            last = (over[0] - 1) if len(over) else len(g) - 1
            row = g.iloc[max(int(last), 0)]
            rows.append({"method": method, "seed": int(seed), "tolerance": float(tol),
                         "removable_share": float(row[share_column]), "n_removable": int(row["n_pruned"]),
                         "base": base, "value": float(row[value_column])})
    return pd.DataFrame(rows, columns=["method", "seed", "tolerance", "removable_share", "n_removable", "base",
                                       "value"])


def heads_dict(pairs: Sequence[tuple[int, int]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for layer, head in pairs:
        out.setdefault(int(layer), []).append(int(head))
    return out


@torch.no_grad()
def _time_forward(model: nn.Module, batches: Sequence[Batch], repeats: int) -> float:
    model(**model_inputs(batches[0]))  # warm-up
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for batch in batches:
            model(**model_inputs(batch))
        best = min(best, time.perf_counter() - start)
    return best


def measure_pruning(model: nn.Module, heads_to_prune: dict[int, list[int]], batches: Sequence[Batch],
                    repeats: int = 3) -> dict[str, float]:
    """Really remove heads from a copy of ``model``; parameters and best-of-``repeats`` forward time.

    Returns ``heads_pruned, params_full, params_pruned, params_saved_share, seconds_full,
    seconds_pruned, time_saved_share``.
    """
    pruned = prune_heads(copy.deepcopy(model).eval(), heads_to_prune)
    t_full = _time_forward(model.eval(), batches, repeats)
    t_pruned = _time_forward(pruned, batches, repeats)
    p_full, p_pruned = count_parameters(model), count_parameters(pruned)
    return {"heads_pruned": sum(len(v) for v in heads_to_prune.values()), "params_full": p_full,
            "params_pruned": p_pruned, "params_saved_share": 1 - p_pruned / p_full,
            "seconds_full": t_full, "seconds_pruned": t_pruned, "time_saved_share": 1 - t_pruned / t_full}


class HardConcreteGates(nn.Module):
    """Hard Concrete gates ``[layers, heads]`` (Louizos et al. 2018): stretched, clamped sigmoid.

    Training: z = min(1, max(0, sigmoid((log u − log(1−u) + log_alpha) / β) (ζ − γ) + γ)), u ~ U(0,1).
    Test: z = min(1, max(0, sigmoid(log_alpha) (ζ − γ) + γ)). P(z ≠ 0) =
    sigmoid(log_alpha − β log(−γ / ζ)).
    """

    def __init__(self, n_layers: int, n_heads: int, beta: float = 2 / 3, gamma: float = -0.1, zeta: float = 1.1,
                 init: float = 2.0):
        super().__init__()
        self.log_alpha = nn.Parameter(torch.full((n_layers, n_heads), float(init)))
        self.beta, self.gamma, self.zeta = beta, gamma, zeta

    def forward(self, generator: torch.Generator | None = None) -> torch.Tensor:
        if self.training:
            u = torch.rand(self.log_alpha.shape, generator=generator).clamp(1e-6, 1 - 1e-6)
            s = torch.sigmoid((torch.log(u) - torch.log(1 - u) + self.log_alpha) / self.beta)
        else:
            s = torch.sigmoid(self.log_alpha)
        return (s * (self.zeta - self.gamma) + self.gamma).clamp(0.0, 1.0)

    def p_open(self) -> torch.Tensor:
        """P(gate ≠ 0) ``[layers, heads]`` (the expected L0 norm's terms)."""
        return torch.sigmoid(self.log_alpha - self.beta * math.log(-self.gamma / self.zeta))


def train_l0_gates(model: nn.Module, batches: Sequence[Batch], loss_fn: LossFn, lam: float, *,
                   steps: int = 200, lr: float = 0.1, seed: int = 0) -> pd.DataFrame:
    """Learn Hard Concrete head gates on a frozen model: loss = mean task loss + λ Σ P(gate ≠ 0).

    Returns ``layer, head, log_alpha, p_open, gate, kept, lam, seed`` (``gate``: deterministic
    test-time value; ``kept``: gate > 0).
    """
    if not batches:
        raise WorkbenchError("train_l0_gates: no batches")
    n_layers, n_heads = head_shape(model)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    hard = HardConcreteGates(n_layers, n_heads).train()
    opt = torch.optim.Adam(hard.parameters(), lr=lr)
    was_training = model.training
    model.eval()
    with frozen(model), HeadGates(model) as gates:
        for it in range(steps):
            batch = batches[it % len(batches)]
            gates.gates = hard(gen)
            loss = loss_fn(model, batch).mean() + lam * hard.p_open().sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.train(was_training)
    hard.eval()
    with torch.no_grad():
        z, p = hard(), hard.p_open()
    layers, heads = np.indices((n_layers, n_heads))
    return pd.DataFrame({"layer": layers.ravel(), "head": heads.ravel(),
                         "log_alpha": hard.log_alpha.detach().numpy().ravel(), "p_open": p.numpy().ravel(),
                         "gate": z.numpy().ravel(), "kept": (z.numpy() > 0).ravel(), "lam": lam, "seed": seed})


def pos_task(lm, corpus, *, batch_size: int = 16, eval_share: float = 0.3, epochs: int = 30, seed: int = 0):
    """The task behind importance and pruning for an encoder: MLM loss when the model has an MLM
    head, else a POS tagging head (linear probe on the last layer, encoder frozen) on ``corpus.upos``.

    Returns ``(train_batches, eval_batches, loss_fn, metric_fn, description)``; ``metric_fn(model,
    gates)`` is eval accuracy (POS) or minus the eval MLM loss.
    """
    from bertology.probes.heads.importance import mask_batches, mlm_loss, tagging_batches, train_tagging_head, mean_loss

    sentences = list(corpus)
    order = np.random.default_rng(seed).permutation(len(sentences))
    n_eval = max(1, int(round(eval_share * len(sentences))))
    eval_s, train_s = [sentences[i] for i in order[:n_eval]], [sentences[i] for i in order[n_eval:]]
    if lm.has_mlm_head and lm.model is not getattr(lm.model, "base_model", lm.model):
        tok = lm.tokenizer
        def enc(ss):
            out = []
            for start in range(0, len(ss), batch_size):
                e = tok([s.words for s in ss[start:start + batch_size]], is_split_into_words=True, truncation=True,
                        max_length=128, padding=True, return_tensors="pt")
                out.append({k: v for k, v in e.items() if k in ("input_ids", "attention_mask", "token_type_ids")})
            return out
        special = list(tok.all_special_ids)
        train = mask_batches(enc(train_s), tok.mask_token_id, len(tok), special, seed=seed)
        evals = mask_batches(enc(eval_s), tok.mask_token_id, len(tok), special, seed=seed + 1)
        metric = lambda model, gates: -mean_loss(model, evals, mlm_loss, gates)
        return train, evals, mlm_loss, metric, "MLM loss (metric: minus eval loss)"
    if any(s.upos is None for s in sentences):
        raise WorkbenchError(f"corpus {corpus.name}: no UPOS tags for the POS task head")
    labels = sorted({t for s in sentences for t in s.upos})
    index = {t: i for i, t in enumerate(labels)}
    train = tagging_batches(lm.tokenizer, train_s, [s.upos for s in train_s], index, batch_size)
    evals = tagging_batches(lm.tokenizer, eval_s, [s.upos for s in eval_s], index, batch_size)
    head = train_tagging_head(lm.model, train, len(labels), epochs=epochs, seed=seed)
    metric = lambda model, gates: head.accuracy(model, evals, gates)
    return train, evals, head.loss, metric, f"POS tagging head ({corpus.sources.get('upos', 'upos')}), metric: accuracy"
