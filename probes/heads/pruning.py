"""Head pruning: curves (Michel et al. 2019), real removal, and L0 / Hard Concrete gates (Voita et al.
2019, Louizos et al. 2018).

- :func:`pruning_task`: the task (MLM loss or a POS head) with a train / dev / test split by sentence;
  :func:`classifier_task`: a fine-tuned classifier's own loss and accuracy on its fine-tune's splits
  (Michel et al.'s setting).
- :func:`pruning_curve`: metric vs share of heads removed, ``step`` (10%) of all heads at a time, in
  order of gradient importance (re-scored after each step), random order (per seed) or head type
  (unspecialised heads first, specialised last), refined to single heads near each tolerance's
  crossing. Heads are switched off with gates.
- :func:`removable_shares`: the share removable before the metric drops by a tolerance (chosen on
  one metric column, read on another; ``threshold_is_lower_bound`` when only "≥" is known).
- :func:`compare_orders`: two pruning orders at one share, paired bootstrap over sentences.
- :func:`measure_pruning`: really remove heads; report parameters and measured inference time.
- :class:`HardConcreteGates` / :func:`train_l0_gates`: stochastic gates per head with
  loss = task loss + λ Σ P(gate ≠ 0); the encoder stays frozen, only ``log_alpha`` is learned.
- :func:`structured_prune` / :func:`matched_components`: Prasanna et al. (2020)'s good, bad and random
  sub-networks of heads and FFN blocks, as their released code makes them by default (the earlier
  choices as named options; docs/METHODS.md).

Everything runs on the model's device: gate tensors are filled on the CPU and moved there once,
batches are moved there where they enter the model, and results come back with ``.cpu()``.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from torch import nn

from bertology.errors import WorkbenchError
from bertology.models import model_device, to_device
from bertology.numbering import head_indices, head_number, head_numbers, layer_number
from bertology.probes.heads.gates import (
    HeadGates,
    count_parameters,
    gates_from_heads,
    head_shape,
    ones_gates,
    prune_heads,
)
from bertology.probes.heads.importance import Batch, LossFn, frozen, importance_scores, model_inputs
from bertology.progress import progress_bar
from bertology.uncertainty import DEFAULT_RESAMPLES, is_small_sample, paired_bootstrap, ratio_bootstrap

MetricFn = Callable[[nn.Module, torch.Tensor], float]  # (model, gates [L, H]) -> metric
TYPE_PRUNE_ORDER = ("other", "broad", "special", "rare-token", "syntactic", "positional")


REFINE_MODES = ("none", "bracket", "all")


def _steps(n_heads: int, step: float) -> list[int]:
    per = max(1, int(round(step * n_heads)))
    return list(range(0, n_heads + 1, per)) + ([n_heads] if n_heads % per else [])


def removal_order(
    model: nn.Module,
    method: str,
    counts: Sequence[int],
    *,
    seed: int = 0,
    batches: Sequence[Batch] | None = None,
    loss_fn: LossFn | None = None,
    head_types: pd.DataFrame | None = None,
) -> list[tuple[int, int]]:
    """The ``(layer, head)`` removal order of one pruning curve, ``counts[-1]`` heads long.

    ``importance``: at each count of ``counts`` (the coarse grid) importance is re-scored with the
    heads removed so far gated off (Michel et al.), and the next heads up to that count are the least
    important ones, least important first; ``random``: a permutation drawn with ``seed``; ``type``:
    unspecialised types first (:data:`TYPE_PRUNE_ORDER`), lowest confidence first, ties by ``seed``.
    Evaluating the first ``k`` heads of the order for any ``k`` between two grid counts is the curve
    at single-head resolution (what threshold refinement does).
    """
    n_layers, n_heads = head_shape(model)
    total = n_layers * n_heads
    if method == "random":
        perm = np.random.default_rng(seed).permutation(total)
        return [(int(i) // n_heads, int(i) % n_heads) for i in perm][: counts[-1]]
    if method == "type":
        if head_types is None:
            raise WorkbenchError("pruning_curve(method='type') needs head_types")
        rng = np.random.default_rng(seed)
        t = head_types.assign(
            _tie=rng.random(len(head_types)),
            _rank=head_types["type"].map({k: i for i, k in enumerate(TYPE_PRUNE_ORDER)}),
        )
        t = t.sort_values(["_rank", "confidence", "_tie"])
        return head_indices(zip(t["layer"], t["head"]))[: counts[-1]]
    if method != "importance":
        raise WorkbenchError(f"pruning_curve: unknown method {method!r} (importance, random, type)")
    if batches is None or loss_fn is None:
        raise WorkbenchError("pruning_curve(method='importance') needs batches and loss_fn")
    gates = torch.ones(n_layers, n_heads)
    order: list[tuple[int, int]] = []
    for count in progress_bar(counts, desc="pruning order (importance re-scored)", unit="step"):
        if len(order) >= count:
            continue
        scores = importance_scores(model, batches, loss_fn, normalise=True, base_gates=gates)
        removed = set(order)
        scores = scores[[pair not in removed for pair in head_indices(zip(scores["layer"], scores["head"]))]]
        chosen = scores.sort_values("importance", kind="stable").head(count - len(order))
        for layer, head in head_indices(zip(chosen["layer"], chosen["head"])):
            gates[layer, head] = 0.0
            order.append((layer, head))
    return order


def _degradation(base: float, values: np.ndarray) -> np.ndarray:
    """Relative worsening ``(base - value) / |base|`` (higher metric = better)."""
    return (base - values) / max(abs(base), 1e-12)


def _refine_counts(points: dict[int, float], tolerances: Sequence[float]) -> set[int]:
    """Counts between the last evaluated count within each tolerance and the first beyond it that
    are not evaluated yet (``points``: ``{n_pruned: metric}``, count 0 included)."""
    counts = sorted(points)
    degradation = _degradation(points[0], np.array([points[c] for c in counts]))
    wanted: set[int] = set()
    for tol in tolerances:
        over = np.flatnonzero(degradation > tol)
        if len(over) and over[0] > 0:
            wanted |= set(range(counts[over[0] - 1] + 1, counts[over[0]]))
    return wanted - set(points)


def pruning_curve(
    model: nn.Module,
    metric_fn: MetricFn,
    *,
    method: str = "importance",
    batches: Sequence[Batch] | None = None,
    loss_fn: LossFn | None = None,
    step: float = 0.1,
    seeds: Sequence[int] = (0,),
    head_types: pd.DataFrame | None = None,
    max_share: float = 1.0,
    refine: str = "none",
    tolerances: Sequence[float] = (),
    report_metrics: dict[str, MetricFn] | None = None,
) -> pd.DataFrame:
    """Metric as heads are removed ``step`` × all heads at a time, refined near thresholds.

    method: ``importance`` (needs ``batches`` and ``loss_fn``; importance re-scored with the
    current gates after each step), ``random`` (one curve per seed) or ``type`` (needs
    ``head_types`` from :func:`bertology.probes.heads.classification.classify_heads`; within a type, lowest
    confidence first, ties by seed); see :func:`removal_order`.

    ``metric_fn`` is the selection metric (evaluated on dev by the pruning analysis). ``refine``:
    ``none`` (the coarse grid only), ``bracket`` (for each relative tolerance of ``tolerances``, every
    single-head count between the last grid point within it and the first beyond it, so the first
    crossing is found to one head) or ``all`` (every count up to ``max_share``). ``report_metrics``
    (``{name: metric}``, e.g. the test split's) are evaluated at every point as ``metric_<name>``.

    Returns ``method, seed, n_pruned, share_pruned, metric, pruned, n_heads, refined`` (+ one
    ``metric_<name>`` per report metric); ``pruned``: the ``(layer, head)`` list removed so far, as a
    string; ``refined``: the point was added by refinement, not on the ``step`` grid.
    """
    if refine not in REFINE_MODES:
        raise WorkbenchError(f"pruning_curve: refine must be one of {', '.join(REFINE_MODES)}, not {refine!r}")
    n_layers, n_heads = head_shape(model)
    total = n_layers * n_heads
    grid = [c for c in _steps(total, step) if c <= max_share * total + 1e-9]
    device = model_device(model)
    rows = []
    curve_seeds = seeds if method in ("random", "type") else seeds[:1]
    # a bar over the points evaluated (a refinement's points added to it when they are known)
    bar = progress_bar(total=len(grid) * len(curve_seeds), desc=f"pruning curve ({method})", unit="point")
    for seed in curve_seeds:
        order = removal_order(model, method, grid, seed=seed, batches=batches, loss_fn=loss_fn, head_types=head_types)

        def gates_for(count: int, order: list = order) -> torch.Tensor:  # this seed's order
            gates = torch.ones(n_layers, n_heads)
            for layer, head in order[:count]:
                gates[layer, head] = 0.0
            return gates.to(device)  # filled on the CPU, moved once

        def point(count: int) -> float:
            value = float(metric_fn(model, gates_for(count)))
            bar.update()
            return value

        points = {count: point(count) for count in grid}
        extra = (
            set(range(grid[-1] + 1)) - set(points)
            if refine == "all"
            else (_refine_counts(points, tolerances) if refine == "bracket" else set())
        )
        bar.total += len(extra)
        points |= {count: point(count) for count in sorted(extra)}
        for count in sorted(points):
            row = {
                "method": method,
                "seed": seed,
                "n_pruned": count,
                "share_pruned": count / total,
                "metric": points[count],
                "pruned": str(head_numbers(sorted(order[:count]))),  # (layer, head) numbers, from 1
                "n_heads": total,
                "refined": count not in grid,
            }
            for name, fn in (report_metrics or {}).items():
                row[f"metric_{name}"] = float(fn(model, gates_for(count)))
            rows.append(row)
    bar.close()
    return pd.DataFrame(rows)


def heads_pruned_at(
    curve: pd.DataFrame, share: float, share_column: str = "share_pruned"
) -> tuple[pd.Series, list[tuple[int, int]]]:
    """The curve row nearest ``share`` of heads removed and its 0-based ``(layer, head)`` index list
    (the ``pruned`` column holds the heads' numbers, from 1, as a string so the table stays plain
    parquet)."""
    row = curve.iloc[(curve[share_column] - share).abs().argmin()]
    return row, head_indices(ast.literal_eval(row["pruned"]))


def removable_shares(
    curve: pd.DataFrame,
    tolerances: Sequence[float] = (0.01, 0.05),
    *,
    share_column: str = "share_pruned",
    value_column: str = "metric",
    report_column: str | None = None,
    n_heads: int | None = None,
) -> pd.DataFrame:
    """How many heads can go before the metric worsens by each relative ``tolerance`` (Michel et al.'s
    question: "what share of heads can be removed before a noticeable drop?").

    ``curve``: rows of :func:`pruning_curve` (higher metric = better; for a loss the metric is minus
    the loss, so a 1% rise of the loss is a 1% relative drop of the metric). Per ``method, seed``:
    the relative degradation at each evaluated point is ``(base - value) / |base|`` with ``base`` the
    ``value_column`` with no head removed; the removable share is the largest share reached before
    the degradation first exceeds the tolerance (selection on ``value_column``: dev in the pruning
    analysis). ``report_column`` (test) is read at the chosen point, with its own base.

    Returns ``method, seed, tolerance, removable_share, n_removable, base, value, next_n_pruned,
    resolution_heads, threshold_is_lower_bound`` (+ ``base_report, value_report, drop_report`` with a
    ``report_column``). ``next_n_pruned``: the first evaluated count beyond the tolerance (-1 when
    none); ``resolution_heads``: heads between the threshold and that count (1 = measured to one
    head); ``threshold_is_lower_bound``: the threshold is only "≥": the curve was not evaluated at the
    next head (a coarse grid) or stopped before every head (``n_heads``, or the curve's ``n_heads``
    column) was removed without crossing the tolerance.
    """
    rows = []
    for (method, seed), g in curve.sort_values(share_column).groupby(["method", "seed"], sort=False):
        start = g[g[share_column] == 0]
        if start.empty:
            raise WorkbenchError(f"pruning curve {method}/{seed}: no point with no head removed")
        base = float(start[value_column].iloc[0])
        total = n_heads if n_heads is not None else (int(g["n_heads"].iloc[0]) if "n_heads" in g else None)
        degradation = _degradation(base, g[value_column].to_numpy())
        for tol in tolerances:
            over = np.flatnonzero(degradation > tol)
            last = (over[0] - 1) if len(over) else len(g) - 1
            row = g.iloc[max(int(last), 0)]
            n_removable = int(row["n_pruned"])
            next_n = int(g["n_pruned"].iloc[over[0]]) if len(over) else -1
            ran_to_end = total is not None and int(g["n_pruned"].max()) >= total
            lower_bound = (next_n - n_removable > 1) if len(over) else not ran_to_end
            out = {
                "method": method,
                "seed": int(seed),
                "tolerance": float(tol),
                "removable_share": float(row[share_column]),
                "n_removable": n_removable,
                "base": base,
                "value": float(row[value_column]),
                "next_n_pruned": next_n,
                "resolution_heads": (next_n - n_removable) if len(over) else -1,
                "threshold_is_lower_bound": bool(lower_bound),
            }
            if report_column is not None:
                base_report = float(start[report_column].iloc[0])
                out |= {
                    "base_report": base_report,
                    "value_report": float(row[report_column]),
                    "drop_report": float(_degradation(base_report, np.array([row[report_column]]))[0]),
                }
            rows.append(out)
    columns = [
        "method",
        "seed",
        "tolerance",
        "removable_share",
        "n_removable",
        "base",
        "value",
        "next_n_pruned",
        "resolution_heads",
        "threshold_is_lower_bound",
    ]
    return pd.DataFrame(
        rows, columns=columns + (["base_report", "value_report", "drop_report"] if report_column else [])
    )


def compare_orders(
    model: nn.Module,
    curve: pd.DataFrame,
    sentence_scores: SentenceScoresFn,
    batches: Sequence[Batch],
    shares: Sequence[float],
    *,
    seed: int = 0,
    share_column: str = "share_pruned",
    n_resamples: int = DEFAULT_RESAMPLES,
) -> pd.DataFrame:
    """Every pair of pruning orders (``method`` of ``curve``) at each share of heads removed, on the
    same sentences: difference of the metric with a paired bootstrap interval and p-value.

    At each share the count is the count nearest ``share`` that every order evaluated (a point refined
    near one order's threshold is not compared with orders that lack it); each order's heads at
    that count are re-applied and scored per sentence on ``batches`` (the test split) with
    ``sentence_scores``; an order with several seeds (random) is the mean over its seeds of the
    per-sentence scores. Returns ``share_removed, n_pruned, method_a, method_b, n_seeds_a,
    n_seeds_b, value_a, value_b, difference, low, high, p_value, n_sentences, n_items, comparison,
    split, small_sample`` (``n_items``: the metric's denominator summed, e.g. scored words).
    """
    columns = [
        "share_removed",
        "n_pruned",
        "method_a",
        "method_b",
        "n_seeds_a",
        "n_seeds_b",
        "value_a",
        "value_b",
        "difference",
        "low",
        "high",
        "p_value",
        "n_sentences",
        "n_items",
        "comparison",
        "split",
        "small_sample",
    ]
    methods = list(dict.fromkeys(curve["method"]))
    rows = []
    n_layers, n_heads = head_shape(model)
    total = n_layers * n_heads
    common = sorted(set.intersection(*(set(curve.loc[curve["method"] == m, "n_pruned"].astype(int)) for m in methods)))
    for share in shares:
        if not common:
            break
        count = min(common, key=lambda c: (abs(c / total - share), c))  # evaluated by every order
        scores = {}
        for method in methods:
            at = curve[(curve["method"] == method) & (curve["n_pruned"] == count)]
            per_seed = []
            for pruned in at["pruned"]:
                gates = torch.ones(n_layers, n_heads)
                for layer, head in head_indices(ast.literal_eval(pruned)):
                    gates[layer, head] = 0.0
                per_seed.append(sentence_scores(model, gates.to(model_device(model)), batches))
            if per_seed:
                scores[method] = (np.mean([n for n, _ in per_seed], axis=0), per_seed[0][1], len(per_seed))
        for i, a in enumerate(methods):
            for b in methods[i + 1 :]:
                if a not in scores or b not in scores:
                    continue
                (num_a, den, k_a), (num_b, _, k_b) = scores[a], scores[b]
                cmp = paired_bootstrap(num_a, num_b, den, den, n_resamples=n_resamples, seed=seed)
                n_items = int(den.sum())
                rows.append(
                    {
                        "share_removed": count / (n_layers * n_heads),
                        "n_pruned": count,
                        "method_a": a,
                        "method_b": b,
                        "n_seeds_a": k_a,
                        "n_seeds_b": k_b,
                        "value_a": float(num_a.sum() / den.sum()),
                        "value_b": float(num_b.sum() / den.sum()),
                        "difference": cmp.difference,
                        "low": cmp.low,
                        "high": cmp.high,
                        "p_value": cmp.p_value,
                        "n_sentences": cmp.n_groups,
                        "n_items": n_items,
                        "comparison": "paired bootstrap over test sentences",
                        "split": "test",
                        "small_sample": is_small_sample(n_items),
                    }
                )
    return pd.DataFrame(rows, columns=columns)


def heads_dict(pairs: Sequence[tuple[int, int]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for layer, head in pairs:
        out.setdefault(int(layer), []).append(int(head))
    return out


@torch.no_grad()
def _paired_forward_seconds(models: Sequence[nn.Module], batches: Sequence[Batch], repeats: int) -> np.ndarray:
    """Wall seconds of one forward pass over ``batches`` per model and round: ``[repeats, models]``.
    One warm-up round over every batch first (thread pools, packed weights and the kernels of each
    padded length are made then, not inside the first timed pass), then the models take turns in
    each round, so load from other processes falls on all of them alike; on a GPU the clock stops
    once its queued work is done."""
    devices = [model_device(m) for m in models]
    inputs = {d: [to_device(model_inputs(batch), d) for batch in batches] for d in dict.fromkeys(devices)}

    def sync(device: torch.device) -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    out = np.zeros((repeats, len(models)))
    for round_ in range(repeats + 1):
        for k, model in enumerate(models):
            sync(devices[k])
            start = time.perf_counter()
            for batch in inputs[devices[k]]:
                model(**batch)
            sync(devices[k])
            if round_:  # round 0 is the warm-up
                out[round_ - 1, k] = time.perf_counter() - start
    return out


def measure_pruning(
    model: nn.Module, heads_to_prune: dict[int, list[int]], batches: Sequence[Batch], repeats: int = 5
) -> dict[str, float]:
    """Really remove heads from a copy of ``model``; parameters and forward time.

    Time: a warm-up round, then ``repeats`` rounds in which the full and the pruned model each run
    one forward pass over ``batches`` in turn (:func:`_paired_forward_seconds`). ``seconds_full`` /
    ``seconds_pruned``: the median over rounds; ``time_saved_share``: the mean over rounds of
    ``1 - pruned / full`` with a Student-t interval over rounds (``time_saved_share_low``,
    ``_high``; NaN with one round), ``timing_rounds``: the rounds.

    Returns ``heads_pruned, params_full, params_pruned, params_saved_share, seconds_full,
    seconds_pruned, time_saved_share, time_saved_share_low, time_saved_share_high, timing_rounds``.
    """
    from bertology.uncertainty import t_interval

    pruned = prune_heads(copy.deepcopy(model).eval(), heads_to_prune)
    seconds = _paired_forward_seconds([model.eval(), pruned], batches, max(1, int(repeats)))  # [rounds, 2]
    saved = 1 - seconds[:, 1] / seconds[:, 0]
    interval = t_interval(saved, 0.95) if len(saved) >= 2 else None
    p_full, p_pruned = count_parameters(model), count_parameters(pruned)
    return {
        "heads_pruned": sum(len(v) for v in heads_to_prune.values()),
        "params_full": p_full,
        "params_pruned": p_pruned,
        "params_saved_share": 1 - p_pruned / p_full,
        "seconds_full": float(np.median(seconds[:, 0])),
        "seconds_pruned": float(np.median(seconds[:, 1])),
        "time_saved_share": float(saved.mean()),
        "time_saved_share_low": interval.low if interval else math.nan,
        "time_saved_share_high": interval.high if interval else math.nan,
        "timing_rounds": len(saved),
    }


class HardConcreteGates(nn.Module):
    """Hard Concrete gates ``[layers, heads]`` (Louizos et al. 2018): stretched, clamped sigmoid.

    Training: z = min(1, max(0, sigmoid((log u − log(1−u) + log_alpha) / β) (ζ − γ) + γ)), u ~ U(0,1).
    Test: z = min(1, max(0, sigmoid(log_alpha) (ζ − γ) + γ)). P(z ≠ 0) =
    sigmoid(log_alpha − β log(−γ / ζ)).
    """

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        beta: float = 2 / 3,
        gamma: float = -0.1,
        zeta: float = 1.1,
        init: float = 2.0,
    ):
        super().__init__()
        self.log_alpha = nn.Parameter(torch.full((n_layers, n_heads), float(init)))
        self.beta, self.gamma, self.zeta = beta, gamma, zeta

    def forward(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """Gates on ``log_alpha``'s device; the training noise is drawn on ``generator``'s device (a
        CPU generator gives the same gates on every device) and moved there."""
        if self.training:
            where = generator.device if generator is not None else self.log_alpha.device
            u = torch.rand(self.log_alpha.shape, generator=generator, device=where)
            u = u.to(self.log_alpha.device).clamp(1e-6, 1 - 1e-6)
            s = torch.sigmoid((torch.log(u) - torch.log(1 - u) + self.log_alpha) / self.beta)
        else:
            s = torch.sigmoid(self.log_alpha)
        return (s * (self.zeta - self.gamma) + self.gamma).clamp(0.0, 1.0)

    def p_open(self) -> torch.Tensor:
        """P(gate ≠ 0) ``[layers, heads]`` (the expected L0 norm's terms)."""
        return torch.sigmoid(self.log_alpha - self.beta * math.log(-self.gamma / self.zeta))


def train_l0_gates(
    model: nn.Module,
    batches: Sequence[Batch],
    loss_fn: LossFn,
    lam: float,
    *,
    steps: int = 200,
    lr: float = 0.1,
    seed: int = 0,
) -> pd.DataFrame:
    """Learn Hard Concrete head gates on a frozen model: loss = mean task loss + λ Σ P(gate ≠ 0).

    Returns ``layer, head, log_alpha, p_open, gate, kept, lam, seed`` (``gate``: deterministic
    test-time value; ``kept``: gate > 0). The gates live on the model's device; their noise comes
    from a seeded CPU generator, so every device draws the same.
    """
    if not batches:
        raise WorkbenchError("train_l0_gates: no batches")
    n_layers, n_heads = head_shape(model)
    device = model_device(model)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    hard = HardConcreteGates(n_layers, n_heads).to(device).train()
    opt = torch.optim.Adam(hard.parameters(), lr=lr)
    was_training = model.training
    model.eval()
    with frozen(model), HeadGates(model) as gates:
        for it in progress_bar(range(steps), desc=f"L0 gates (lambda {lam:g})", unit="step"):
            batch = to_device(batches[it % len(batches)], device)
            gates.gates = hard(gen)
            loss = loss_fn(model, batch).mean() + lam * hard.p_open().sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.train(was_training)
    hard.eval()
    with torch.no_grad():
        z, p = hard().cpu(), hard.p_open().cpu()
    layers, heads = np.indices((n_layers, n_heads))
    return pd.DataFrame(
        {
            "layer": layer_number(layers.ravel()),
            "head": head_number(heads.ravel()),
            "log_alpha": hard.log_alpha.detach().cpu().numpy().ravel(),
            "p_open": p.numpy().ravel(),
            "gate": z.numpy().ravel(),
            "kept": (z.numpy() > 0).ravel(),
            "lam": lam,
            "seed": seed,
        }
    )


def evaluate_l0_gates(
    model: nn.Module, gates: pd.DataFrame, task: PruningTask, *, seed: int = 0, n_resamples: int = DEFAULT_RESAMPLES
) -> pd.DataFrame:
    """What each λ's learned gates cost: the heads whose deterministic gate is 0 (``kept`` False in
    :func:`train_l0_gates`' table) switched off, the metric on dev and on test.

    One row per ``lam, seed``: ``heads_kept, n_heads, share_removed, value_dev, value`` (test) with
    ``value_low``/``value_high`` (95%, a bootstrap over test sentences of the metric's per-sentence
    sums), ``base`` / ``base_dev`` (no head off), ``metric``, ``selected_on`` (``"none"``: every λ is
    reported; a λ chosen for the reader would be chosen on ``value_dev``), ``split`` (``"test"``) and
    ``n_test_items`` / ``small_sample``.
    """
    n_layers, n_heads = head_shape(model)
    base_dev = task.metric("dev")(model, ones_gates(model, n_layers, n_heads))
    base = task.metric("test")(model, ones_gates(model, n_layers, n_heads))
    rows = []
    for (lam, gate_seed), part in gates.groupby(["lam", "seed"], sort=False):
        closed = part[~part["kept"].astype(bool)]
        off = head_indices(zip(closed["layer"], closed["head"]))
        mask = gates_from_heads(model, off)
        numerator, denominator = task.sentence_scores(model, mask, task.test)
        boot = ratio_bootstrap(numerator, denominator, n_resamples=n_resamples, seed=seed)
        n_items = int(np.sum(denominator))
        rows.append(
            {
                "lam": float(lam),
                "seed": int(gate_seed),
                "heads_kept": n_layers * n_heads - len(off),
                "n_heads": n_layers * n_heads,
                "share_removed": len(off) / (n_layers * n_heads),
                "value_dev": task.metric("dev")(model, mask),
                "value": boot.estimate,
                "value_low": boot.low,
                "value_high": boot.high,
                "base_dev": base_dev,
                "base": base,
                "metric": task.description,
                "selected_on": "none",
                "split": "test",
                "n_test_items": n_items,
                "small_sample": is_small_sample(n_items),
            }
        )
    return pd.DataFrame(rows)


SentenceScoresFn = Callable[[nn.Module, torch.Tensor, Sequence[Batch]], tuple[np.ndarray, np.ndarray]]


@dataclass
class PruningTask:
    """The task behind importance and pruning, with a train / dev / test split by sentence.

    ``train``: batches importance, gates and the POS head learn from; ``dev``: where thresholds are
    selected; ``test``: where the selected points are reported. ``sentence_scores(model, gates,
    batches) -> (numerator, denominator)`` per sentence ``[sentences]``: the metric is
    ``numerator.sum() / denominator.sum()`` (POS: correct / scored words; MLM: minus the sentence's
    loss / 1), so a paired bootstrap over sentences compares two pruned models on the same sentences.
    """

    train: list[Batch]
    dev: list[Batch]
    test: list[Batch]
    loss_fn: LossFn
    sentence_scores: SentenceScoresFn
    description: str
    n_sentences: dict[str, int] = field(default_factory=dict)  # {"train", "dev", "test"}: sentences per split
    n_items: dict[str, int] = field(default_factory=dict)  # scored words (POS) or sentences (MLM) per split

    def metric(self, split: str) -> MetricFn:
        """``metric(model, gates) -> float`` on ``dev``, ``test`` or ``heldout`` (dev + test)."""
        batches = {"dev": self.dev, "test": self.test, "heldout": self.dev + self.test}[split]

        def value(model: nn.Module, gates: torch.Tensor) -> float:
            numerator, denominator = self.sentence_scores(model, gates, batches)
            return float(numerator.sum() / max(denominator.sum(), 1e-12))

        return value


def pruning_task(
    lm,
    corpus,
    *,
    batch_size: int = 16,
    eval_share: float = 0.3,
    test_share: float = 0.5,
    epochs: int = 30,
    seed: int = 0,
) -> PruningTask:
    """The task behind importance and pruning for an encoder: MLM loss when the model has an MLM
    head, else a POS tagging head (linear probe on the last layer, encoder frozen) on ``corpus.upos``.

    Sentences are shuffled with ``seed``; ``eval_share`` of them are held out and split again by
    sentence into dev (``1 - test_share`` of them) and test (``test_share``; at least one sentence
    each when two or more are held out).
    """
    from bertology.probes.heads.importance import (
        example_losses,
        mask_batches,
        mlm_loss,
        tagging_batches,
        train_tagging_head,
    )

    sentences = list(corpus)
    order = np.random.default_rng(seed).permutation(len(sentences))
    n_eval = max(1, int(round(eval_share * len(sentences))))
    n_test = min(n_eval - 1, max(1, int(round(test_share * n_eval)))) if n_eval > 1 else 0
    split = {
        "test": [sentences[i] for i in order[:n_test]],
        "dev": [sentences[i] for i in order[n_test:n_eval]],
        "train": [sentences[i] for i in order[n_eval:]],
    }
    counts = {name: len(ss) for name, ss in split.items()}
    if lm.has_mlm_head and lm.model is not getattr(lm.model, "base_model", lm.model):
        tok = lm.tokenizer

        def enc(ss):
            out = []
            for start in range(0, len(ss), batch_size):
                e = tok(
                    [s.words for s in ss[start : start + batch_size]],
                    is_split_into_words=True,
                    truncation=True,
                    max_length=128,
                    padding=True,
                    return_tensors="pt",
                )
                out.append({k: v for k, v in e.items() if k in ("input_ids", "attention_mask", "token_type_ids")})
            return out

        special = list(tok.all_special_ids)
        batches = {
            name: mask_batches(enc(split[name]), tok.mask_token_id, len(tok), special, seed=seed + k)
            for k, name in enumerate(("train", "dev", "test"))
        }

        def mlm_scores(model, gates, bs):
            losses = example_losses(model, bs, mlm_loss, gates).cpu().numpy().astype(float)
            return -losses, np.ones_like(losses)

        return PruningTask(
            batches["train"],
            batches["dev"],
            batches["test"],
            mlm_loss,
            mlm_scores,
            "MLM loss (metric: minus eval loss)",
            counts,
            dict(counts),
        )
    if any(s.upos is None for s in sentences):
        raise WorkbenchError(f"corpus {corpus.name}: no UPOS tags for the POS task head")
    labels = sorted({t for s in sentences for t in s.upos})
    index = {t: i for i, t in enumerate(labels)}
    batches = {
        name: tagging_batches(lm.tokenizer, ss, [s.upos for s in ss], index, batch_size) for name, ss in split.items()
    }
    head = train_tagging_head(lm.model, batches["train"], len(labels), epochs=epochs, seed=seed)
    words = {name: sum(len(s.words) for s in ss) for name, ss in split.items()}
    return PruningTask(
        batches["train"],
        batches["dev"],
        batches["test"],
        head.loss,
        lambda model, gates, bs: head.sentence_scores(model, bs, gates),
        f"POS tagging head ({corpus.sources.get('upos', 'upos')}), metric: accuracy",
        counts,
        words,
    )


def classifier_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Per-example cross-entropy ``[batch]`` of a fine-tuned classifier (``*ForTokenClassification``:
    mean over the example's labelled tokens, ``labels [B, T]`` with -100 elsewhere;
    ``*ForSequenceClassification``: the example's one label, ``labels [B]``). The batch is moved to
    the model's device."""
    from bertology.probes.heads.importance import token_cross_entropy

    batch = to_device(batch, model_device(model))
    logits = model(**model_inputs(batch)).logits.float()
    labels = batch["labels"]
    if labels.ndim == 2:
        return token_cross_entropy(logits, labels)
    return nn.functional.cross_entropy(logits, labels, reduction="none")


@torch.no_grad()
def classifier_sentence_scores(
    model: nn.Module, gates: torch.Tensor | None, batches: Sequence[Batch]
) -> tuple[np.ndarray, np.ndarray]:
    """``(correct, scored)`` per example ``[examples]`` of a fine-tuned classifier under ``gates``
    ``[layers, heads]``: right labelled words and labelled words (token tasks), or 1/0 and 1
    (sentence tasks). Accuracy is ``correct.sum() / scored.sum()``."""
    correct, scored = [], []
    was_training = model.training
    model.eval()
    device = model_device(model)
    with HeadGates(model, gates) if gates is not None else contextlib.nullcontext():
        for batch in batches:
            batch = to_device(batch, device)
            labels = batch["labels"]
            pred = model(**model_inputs(batch)).logits.argmax(-1)
            valid = labels != -100
            hit = (pred == labels) & valid
            if labels.ndim == 2:
                hit, valid = hit.sum(-1), valid.sum(-1)
            correct.append(hit.double().cpu().numpy())
            scored.append(valid.double().cpu().numpy())
    model.train(was_training)
    return np.concatenate(correct), np.concatenate(scored)


def classifier_task(
    model: nn.Module, train: list[Batch], dev: list[Batch], test: list[Batch], description: str
) -> PruningTask:
    """Michel et al.'s own setting: the task behind importance and pruning is the fine-tuned
    classifier's loss (:func:`classifier_loss`, importance on ``train``) and its accuracy (thresholds
    chosen on ``dev``, reported on ``test``: the fine-tune's own splits). ``model`` keeps its trained
    head; nothing is retrained. Batches: ``input_ids``, ``attention_mask``, ``token_type_ids``,
    ``labels`` (``[B, T]`` with -100 off first sub-words, or ``[B]``)."""

    def count(batches: list[Batch]) -> tuple[int, int]:
        examples = sum(int(b["labels"].shape[0]) for b in batches)
        items = sum(int((b["labels"] != -100).sum()) for b in batches)
        return examples, items

    sizes = {name: count(bs) for name, bs in (("train", train), ("dev", dev), ("test", test))}
    return PruningTask(
        list(train),
        list(dev),
        list(test),
        classifier_loss,
        classifier_sentence_scores,
        description,
        {k: v[0] for k, v in sizes.items()},
        {k: v[1] for k, v in sizes.items()},
    )


def pos_task(lm, corpus, *, batch_size: int = 16, eval_share: float = 0.3, epochs: int = 30, seed: int = 0):
    """:func:`pruning_task` as ``(train_batches, eval_batches, loss_fn, metric_fn, description)``,
    the held-out batches being dev and test together; ``metric_fn(model, gates)`` is their accuracy
    (POS) or minus their MLM loss."""
    task = pruning_task(lm, corpus, batch_size=batch_size, eval_share=eval_share, epochs=epochs, seed=seed)
    return task.train, task.dev + task.test, task.loss_fn, task.metric("heldout"), task.description


# ---------------------------------------------------------------- structured sub-networks (Prasanna et al. 2020)

# The defaults follow Prasanna et al.'s released code (github sai-prasanna/bert-experiments, commit
# f02280f; docs/METHODS.md, "Structured lottery tickets", quotes each line); the other values keep the
# workbench's earlier reading as named options.
BAD_SUBNETWORKS = ("random_complement", "most_important")
RANDOM_SUBNETWORKS = ("bernoulli", "exact")
SUBNETWORK_KINDS = ("good", "random", "bad")


@dataclass
class StructuredPruning:
    """What :func:`structured_prune` found: the heads and feed-forward blocks the "good" sub-network
    removes (``heads``: ``(layer, head)``; ``ffn``: layers), each component's importance on the
    unpruned model as it was ranked (``head_importance [L, H]``: ℓ2-normalised per layer when
    ``normalise_per_layer``, else raw; ``ffn_importance [L]``, raw), the raw head importance
    (``head_importance_raw``) and the ``trace`` (``step, phase, heads_removed, ffn_removed, dev_metric,
    relative, kept``) of the pruning."""

    heads: list[tuple[int, int]]
    ffn: list[int]
    head_importance: np.ndarray
    ffn_importance: np.ndarray
    trace: pd.DataFrame
    head_importance_raw: np.ndarray | None = None
    normalise_per_layer: bool = True
    continue_phases: bool = True


def head_ranking(raw: np.ndarray, normalise_per_layer: bool) -> np.ndarray:
    """The scores heads are ranked by ``[L, H]``: the raw importance divided by its layer's ℓ2 norm
    (Prasanna et al.'s code, after Michel et al.'s) or the raw importance itself."""
    from bertology.probes.heads.importance import normalise_per_layer as per_layer

    return per_layer(raw) if normalise_per_layer else np.asarray(raw, dtype=float)


def least_important(scores: np.ndarray, alive: Sequence, k: int) -> list:
    """The ``k`` components of ``alive`` (indices into ``scores``: ``(layer, head)`` tuples or layers)
    with the lowest score, lowest first; ties by position. Fewer when fewer are alive."""
    return sorted(alive, key=lambda c: (float(scores[c]), c))[:k]


GateEvaluator = Callable[[torch.Tensor, torch.Tensor], float]  # (head gates [L, H], FFN gates [L]) -> dev metric
GateScorer = Callable[[torch.Tensor, torch.Tensor], tuple[np.ndarray, np.ndarray]]  # -> raw [L, H], [L]


@dataclass
class _StructuredSearch:
    """The state of one structured pruning: gates (1 = on, on the CPU), what is removed, the latest
    importance (raw, components switched off score 0) and the trace."""

    evaluate: GateEvaluator
    score: GateScorer
    keep: float
    normalise_per_layer: bool
    head_gates: torch.Tensor
    ffn_gates: torch.Tensor
    removed_heads: list[tuple[int, int]] = field(default_factory=list)
    removed_ffn: list[int] = field(default_factory=list)
    trace: list[dict] = field(default_factory=list)
    base: float = float("nan")
    head_raw: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ffn_scores: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def rescore(self) -> None:
        self.head_raw, self.ffn_scores = self.score(self.head_gates.clone(), self.ffn_gates.clone())

    def step(self, phase: str, n_heads: int, n_ffn: int) -> bool:
        """Remove the ``n_heads`` least important heads and ``n_ffn`` blocks still on; keep the step
        (and re-estimate importance) when the dev metric stays at or above ``keep`` of the unpruned
        model's, else undo it. False when the step was undone or there was nothing left to remove."""
        n_layers, n_per_layer = self.head_gates.shape
        alive_heads = [(l, h) for l in range(n_layers) for h in range(n_per_layer) if self.head_gates[l, h] > 0]
        alive_ffn = [l for l in range(n_layers) if self.ffn_gates[l] > 0]
        new_heads = least_important(head_ranking(self.head_raw, self.normalise_per_layer), alive_heads, n_heads)
        new_ffn = least_important(self.ffn_scores, alive_ffn, n_ffn)
        if len(new_heads) < min(n_heads, 1) or len(new_ffn) < min(n_ffn, 1):
            return False  # a component kind this phase removes is used up (their code stops the phase too)
        self._switch(new_heads, new_ffn, 0.0)
        value = float(self.evaluate(self.head_gates.clone(), self.ffn_gates.clone()))
        relative = value / self.base if self.base else float("nan")
        kept = bool(relative >= self.keep)
        self.trace.append(
            {
                "step": len(self.trace),
                "phase": phase,
                "heads_removed": len(self.removed_heads) + len(new_heads),
                "ffn_removed": len(self.removed_ffn) + len(new_ffn),
                "dev_metric": value,
                "relative": relative,
                "kept": kept,
            }
        )
        if not kept:
            self._switch(new_heads, new_ffn, 1.0)
            return False
        self.removed_heads += new_heads
        self.removed_ffn += new_ffn
        self.rescore()
        return True

    def _switch(self, heads: list[tuple[int, int]], ffn: list[int], value: float) -> None:
        for l, h in heads:
            self.head_gates[l, h] = value
        for l in ffn:
            self.ffn_gates[l] = value


def structured_phases(n_components: int, head_step: float, ffn_step: int, continue_phases: bool) -> list:
    """``(phase, heads per step, FFN blocks per step)`` of a structured pruning of ``n_components``
    heads: ``joint`` (``max(1, int(head_step * n))`` heads -- truncated, as their code does -- and
    ``ffn_step`` blocks a step), then, with ``continue_phases``, ``heads`` (half as many heads, integer
    division: none when that is 0) and ``ffn`` (``ffn_step`` blocks a step)."""
    per_step = max(1, int(head_step * n_components))
    phases = [("joint", per_step, ffn_step)]
    if continue_phases:
        phases += [("heads", per_step // 2, 0), ("ffn", 0, ffn_step)]
    return [p for p in phases if p[1] or p[2]]


def structured_search(
    evaluate: GateEvaluator,
    score: GateScorer,
    shape: tuple[int, int],
    *,
    head_step: float = 0.1,
    ffn_step: int = 1,
    keep: float = 0.9,
    normalise_per_layer: bool = True,
    continue_phases: bool = True,
) -> StructuredPruning:
    """The search of :func:`structured_prune` on any ``evaluate(head_gates [L, H], ffn_gates [L]) ->
    dev metric`` and ``score(head_gates, ffn_gates) -> (raw head importance [L, H], FFN importance
    [L])`` (gates 1 = on, 0 = removed; a removed component scores 0), for ``shape = (L, H)``."""
    n_layers, n_heads = shape
    search = _StructuredSearch(
        evaluate, score, keep, normalise_per_layer, torch.ones(n_layers, n_heads), torch.ones(n_layers)
    )
    search.base = float(evaluate(search.head_gates.clone(), search.ffn_gates.clone()))
    search.rescore()
    first_raw, first_ffn = np.array(search.head_raw, dtype=float), np.array(search.ffn_scores, dtype=float)
    start = {"step": 0, "phase": "start", "heads_removed": 0, "ffn_removed": 0, "dev_metric": search.base}
    search.trace.append(start | {"relative": 1.0, "kept": True})
    for phase, k_heads, k_ffn in structured_phases(n_layers * n_heads, head_step, ffn_step, continue_phases):
        while search.step(phase, k_heads, k_ffn):
            pass
    return StructuredPruning(
        search.removed_heads,
        search.removed_ffn,
        head_ranking(first_raw, normalise_per_layer),
        first_ffn,
        pd.DataFrame(search.trace),
        head_importance_raw=first_raw,
        normalise_per_layer=normalise_per_layer,
        continue_phases=continue_phases,
    )


def structured_prune(
    model: nn.Module,
    task: PruningTask,
    *,
    head_step: float = 0.1,
    ffn_step: int = 1,
    keep: float = 0.9,
    normalise_per_layer: bool = True,
    continue_phases: bool = True,
) -> StructuredPruning:
    """Prasanna et al. (2020)'s "good" sub-network of a fine-tuned model, as their released code finds
    it (``find_head_mlp_masks.py``): at each step of the ``joint`` phase remove the ``head_step`` share of
    all heads (at least one) and ``ffn_step`` feed-forward blocks with the lowest importance among
    those left (Michel et al.'s gradient importance on ``task.train``, re-estimated after every kept
    step with the removed components gated off; heads ranked on importance ℓ2-normalised per layer
    when ``normalise_per_layer``), until the dev metric falls below ``keep`` times the unpruned
    model's; that step is undone. With ``continue_phases``, pruning then goes on with heads only (half
    the step) and then blocks only, each phase until the metric falls below the same threshold
    (:func:`structured_phases`). ``continue_phases=False`` stops after the joint phase (the
    workbench's earlier reading of the paper). Nothing is retrained here."""
    from bertology.probes.heads.gates import FFNGates
    from bertology.probes.heads.importance import ffn_importance_scores

    device = model_device(model)
    dev = task.metric("dev")

    def evaluate(head_gates: torch.Tensor, ffn_gates: torch.Tensor) -> float:
        with FFNGates(model, ffn_gates.to(device)):
            return dev(model, head_gates.to(device))

    def score(head_gates: torch.Tensor, ffn_gates: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        with FFNGates(model, ffn_gates.to(device)):
            heads = importance_scores(model, task.train, task.loss_fn, normalise=False, base_gates=head_gates)
        with HeadGates(model, head_gates.to(device)):
            ffn = ffn_importance_scores(model, task.train, task.loss_fn, normalise=False, base_gates=ffn_gates)
        return heads["importance_raw"].to_numpy().reshape(head_gates.shape), ffn["importance_raw"].to_numpy()

    return structured_search(
        evaluate,
        score,
        head_shape(model),
        head_step=head_step,
        ffn_step=ffn_step,
        keep=keep,
        normalise_per_layer=normalise_per_layer,
        continue_phases=continue_phases,
    )


def matched_components(
    pruning: StructuredPruning,
    kind: str,
    *,
    seed: int = 0,
    bad: str = "random_complement",
    random: str = "bernoulli",
) -> tuple[list[tuple[int, int]], list[int]]:
    """The heads and FFN blocks a sub-network removes, for heads and blocks separately.

    ``"good"``: the pruning's own result. ``"bad"`` with ``bad="random_complement"`` (Prasanna et al.'s
    code, ``run_glue.py --mask_mode bad``): keep every component the good one removed and remove as
    many, drawn uniformly (``seed``) from the good one's survivors -- when the good one removed more
    than it kept, keep a random draw of as many of its removed components as it kept and remove the
    rest; ``bad="most_important"``: remove as many with the highest importance on the unpruned model.
    ``"random"`` with ``random="bernoulli"`` (their ``--mask_mode random``): each component kept with
    probability (kept by the good one) / (all), so the size varies; ``random="exact"``: exactly as many
    removed, drawn uniformly."""
    if bad not in BAD_SUBNETWORKS:
        raise WorkbenchError(f"matched_components: bad must be one of {', '.join(BAD_SUBNETWORKS)}, not {bad!r}")
    if random not in RANDOM_SUBNETWORKS:
        raise WorkbenchError(
            f"matched_components: random must be one of {', '.join(RANDOM_SUBNETWORKS)}, not {random!r}"
        )
    n_layers, n_heads = pruning.head_importance.shape
    every_head = [(l, h) for l in range(n_layers) for h in range(n_heads)]
    every_ffn = list(range(n_layers))
    good_heads, good_ffn = list(pruning.heads), list(pruning.ffn)
    rng = np.random.default_rng(seed)
    if kind == "good":
        return good_heads, good_ffn
    if kind == "bad" and bad == "random_complement":
        return _random_complement(every_head, good_heads, rng), _random_complement(every_ffn, good_ffn, rng)
    if kind == "bad":
        return _most_important(pruning.head_importance, every_head, len(good_heads)), _most_important(
            pruning.ffn_importance, every_ffn, len(good_ffn)
        )
    if kind == "random" and random == "bernoulli":
        return _bernoulli(every_head, len(good_heads), rng), _bernoulli(every_ffn, len(good_ffn), rng)
    if kind == "random":
        return _exact_draw(every_head, len(good_heads), rng), _exact_draw(every_ffn, len(good_ffn), rng)
    raise WorkbenchError(f"matched_components: kind must be one of {', '.join(SUBNETWORK_KINDS)}, not {kind!r}")


def _random_complement(every: list, removed: list, rng: np.random.Generator) -> list:
    """As many components removed as ``removed`` holds, keeping ``removed`` where it can: drawn from the
    others when they are more, else everything but a draw of ``removed`` as large as the others."""
    gone = set(removed)
    survivors = [c for c in every if c not in gone]
    if len(survivors) > len(removed):
        return sorted(survivors[i] for i in rng.choice(len(survivors), size=len(removed), replace=False))
    kept = {removed[i] for i in rng.choice(len(removed), size=len(survivors), replace=False)}
    return sorted(c for c in every if c not in kept)


def _most_important(scores: np.ndarray, every: list, k: int) -> list:
    return sorted(every, key=lambda c: (-float(scores[c]), c))[:k]


def _bernoulli(every: list, n_removed: int, rng: np.random.Generator) -> list:
    """Each component kept with probability ``1 - n_removed / len(every)``, independently."""
    p_kept = 1.0 - n_removed / len(every)
    return [c for c, u in zip(every, rng.random(len(every))) if not u < p_kept]


def _exact_draw(every: list, k: int, rng: np.random.Generator) -> list:
    return sorted(every[i] for i in rng.choice(len(every), size=k, replace=False))
