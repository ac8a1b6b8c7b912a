"""All-layer probing: probes of every layer trained jointly (one vectorised pass) vs one per layer.

Same standardised features, same train/dev/test split, one process. Baselines: scikit-learn
``LogisticRegression`` (lbfgs, default C = 1, run to convergence) fitted once per layer, against
the workbench's joint linear probes (full-batch L-BFGS on the same objective, all layers at once,
early-stopped on dev; bfloat16 matmuls where the CPU has AMX, and float32); and the same torch MLP
probe trained once per layer in a Python loop against all layers' MLPs trained jointly (same
hyper-parameters, batch 512: isolates the gain from vectorising over layers), and the joint MLP at
batch 128 (4x the Adam steps per epoch; with the same early stopping it trains longer rather than
shorter: the quickstart gains from it only by capping the epochs, see docs/METHODS.md) three ways:
float32 with torch's per-tensor Adam (the implementation before fused Adam: the baseline of the
next two), float32 with fused Adam (what every CPU gets), and auto precision (bfloat16 matmuls
where measured faster). Each table names the CPU and its matrix-unit flags. Prints seconds, speed-up of
each workbench row against its baseline, and test accuracies (mean and best over layers).

Each method runs at every thread count in ``--threads`` (default 1 and all cores); the closing
line compares each side at its own fastest setting (on small CPUs scikit-learn's lbfgs is often
fastest single-threaded: its BLAS and OpenMP pools oversubscribe).

Features (default): the MiniLM-L6 store over the bundled Brown sample, gold UPOS, 1,200 sentences
(``--quick``: 300). ``--synthetic``: planted ``[7 layers, 20k words, 384 dims]`` with 17 labels
whose signal strength varies by layer (``--quick``: 5k words) -- isotropic noise, the easy case
for scikit-learn (8-40 lbfgs iterations per layer against 85-145 on real features).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
import warnings

import numpy as np
import torch
from common import print_table


def _data(args):
    from bertology.probes.probing.synthetic import planted_task
    from bertology.probes.probing.tasks import build_task

    if args.synthetic:
        strengths = {0: 0.10, 1: 0.16, 2: 0.22, 3: 0.25, 4: 0.22, 5: 0.18, 6: 0.12}
        d = planted_task(
            n_layers=7,
            n_words=5000 if args.quick else 20000,
            dim=384,
            n_labels=17,
            signal_layers=strengths,
            seed=args.seed,
        )
        return d.features, d.sentence_offsets, d.task, "synthetic planted"
    from bertology.corpus import load_corpus
    from bertology.models import load_model
    from bertology.store import extract

    corpus = load_corpus("brown-sample", limit=300 if args.quick else 1200)
    store = extract(load_model("minilm-l6", attentions=False), corpus, attentions=False)
    return store.layers(), store.sentence_offsets, build_task(corpus, "pos"), f"MiniLM-L6 x {corpus.name}"


PREVIOUS_MLP = "joint MLP, batch 128, float32, per-tensor Adam (before; baseline)"
CURRENT_MLP = "joint MLP, batch 128, auto precision, fused Adam (the quickstart)"


@contextlib.contextmanager
def _previous_adam():
    """The MLP probes as they trained before fused Adam: torch's per-tensor Adam loop (Adam is
    swapped for one that drops ``fused=``, so the workbench's own code runs unchanged)."""
    adam = torch.optim.Adam

    def per_tensor_adam(*args, fused=None, **kwargs):
        return adam(*args, **kwargs)

    torch.optim.Adam = per_tensor_adam
    try:
        yield
    finally:
        torch.optim.Adam = adam


def _best_of(fn, repeat: int):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="300 sentences (synthetic: 5k words)")
    parser.add_argument("--synthetic", action="store_true", help="planted isotropic features instead of MiniLM")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads",
        default=f"1,{os.cpu_count()}" if (os.cpu_count() or 1) > 1 else "1",
        help="comma list of torch/BLAS thread counts, one table each (default 1 and all)",
    )
    parser.add_argument("--repeat", type=int, default=2, help="best of N runs for the linear probes")
    parser.add_argument("--no-mlp", action="store_true", help="skip the MLP rows")
    args = parser.parse_args()

    import torch
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    from bertology.probes.probing.edge import (
        ProbeConfig,
        SpanFeatures,
        classification_metrics,
        fit_joint,
        predict_logits,
        span_index,
    )
    from bertology.probes.probing.tasks import split_by_sentence

    feats, offsets, task, what = _data(args)
    L, W, D = feats.shape
    y = task.label_ids()
    K = len(task.labels)
    split = split_by_sentence(task, seed=args.seed)
    tokens, mask = span_index(task, offsets)
    if tokens.shape[2] != 1 or tokens.shape[1] != 1:
        raise SystemExit("benchmark expects a single-word, single-span task")
    data = SpanFeatures(feats, tokens, mask, True, args.device)
    tr, dv, te = split["train"], split["dev"], split["test"]
    Xs = data.cached[:, :, 0, 0].cpu().numpy()  # the probes' own standardised inputs [L, n, D]
    print(
        f"{what}: {L} layers x {W} words x {D} dims, {len(task)} examples, {K} labels, "
        f"train {len(tr)} / dev {len(dv)} / test {len(te)}"
    )

    def joint(probe: str, layers: list[int], **kw):
        kw = {"batch_size": 512, **kw}
        cfg = ProbeConfig(probe=probe, max_epochs=30, patience=3, device=args.device, **kw)
        fit = fit_joint(
            data,
            y,
            tr,
            dv,
            n_labels=K,
            mixing=np.eye(L, dtype=bool)[layers],
            learned_mix=False,
            config=cfg,
            seed=args.seed,
        )
        return classification_metrics(predict_logits(fit.model, data, te), y[te], False)["accuracy"]

    def sklearn_per_layer():
        accs, iters = [], []
        for l in range(L):
            clf = LogisticRegression(max_iter=2000).fit(Xs[l][tr], y[tr])
            accs.append(clf.score(Xs[l][te], y[te]))
            iters.append(int(clf.n_iter_.max()))
        return np.array(accs), iters

    best: dict[str, tuple[float, int, np.ndarray]] = {}  # method -> (seconds, threads, accuracies)
    for threads in [int(t) for t in args.threads.split(",")]:
        with threadpool_limits(threads):
            before = torch.get_num_threads()
            torch.set_num_threads(threads)
            rows, sk_iters = _timed_rows(joint, sklearn_per_layer, L, args.repeat, args.no_mlp)
            torch.set_num_threads(before)
        for m, t, _, a in rows:
            if m not in best or t < best[m][0]:
                best[m] = (t, threads, a)
        _print_tables(rows, threads, sk_iters, L)
    _print_fastest(best, args.no_mlp)


def _timed_rows(joint, sklearn_per_layer, L: int, repeat: int, no_mlp: bool) -> tuple[list[tuple], list[int]]:
    """Every method timed once at the current thread count (best of ``repeat`` for the linear probes):
    rows ``(method, seconds, its baseline's seconds, test accuracy per layer [L])``, and scikit-learn's
    lbfgs iterations per layer."""
    joint("linear", [0])  # warm-up (thread pools, allocator)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a ConvergenceWarning would make the baseline unfair
        (acc_sk, sk_iters), t_sk = _best_of(sklearn_per_layer, repeat)
    acc_lin, t_lin = _best_of(lambda: joint("linear", list(range(L))), repeat)
    acc_lin32, t_lin32 = _best_of(lambda: joint("linear", list(range(L)), precision="float32"), repeat)
    acc_adam, t_adam = _best_of(lambda: joint("linear", list(range(L)), solver="adam", lr=3e-3), 1)
    rows = [
        ("sklearn LogisticRegression, 1 per layer (baseline)", t_sk, t_sk, acc_sk),
        ("joint linear, L-BFGS (auto precision)", t_lin, t_sk, acc_lin),
        ("joint linear, L-BFGS (float32)", t_lin32, t_sk, acc_lin32),
        ("joint linear, minibatch Adam", t_adam, t_sk, acc_adam),
    ]
    if not no_mlp:
        acc_mlp, t_mlp = _best_of(lambda: joint("mlp", list(range(L))), 1)
        acc_loop, t_loop = _best_of(lambda: np.concatenate([joint("mlp", [l]) for l in range(L)]), 1)
        with _previous_adam():
            acc_old, t_old = _best_of(lambda: joint("mlp", list(range(L)), batch_size=128, precision="float32"), 1)
        acc_f32, t_f32 = _best_of(lambda: joint("mlp", list(range(L)), batch_size=128, precision="float32"), 1)
        acc_mlp128, t_mlp128 = _best_of(lambda: joint("mlp", list(range(L)), batch_size=128), 1)
        rows += [
            ("torch MLP probe, 1 per layer in a loop (baseline)", t_loop, t_loop, acc_loop),
            ("joint MLP (all layers), batch 512", t_mlp, t_loop, acc_mlp),
            (PREVIOUS_MLP, t_old, t_old, acc_old),
            ("joint MLP, batch 128, float32, fused Adam", t_f32, t_old, acc_f32),
            (CURRENT_MLP, t_mlp128, t_old, acc_mlp128),
        ]
    return rows, sk_iters


def _print_tables(rows: list[tuple], threads: int, sk_iters: list[int], L: int) -> None:
    """One thread count's table (seconds, speed-up against the row's baseline, accuracies) and the
    test accuracy per layer of every method."""
    table = [
        {
            "method": m,
            "seconds": t,
            "speed-up": base / t,
            "mean acc": float(a.mean()),
            "best layer": int(a.argmax()),
            "best acc": float(a.max()),
        }
        for m, t, base, a in rows
    ]
    print_table(
        table,
        f"All-layer probing, {threads} thread(s) (speed-up vs the row's baseline; "
        f"sklearn iterations per layer {sk_iters})",
    )
    per_layer = [
        {"layer": l, **{m.split(",")[0] if "sklearn" in m else m: float(a[l]) for m, _, _, a in rows}} for l in range(L)
    ]
    print_table(per_layer, "Test accuracy per layer")


def _print_fastest(best: dict[str, tuple[float, int, np.ndarray]], no_mlp: bool) -> None:
    """The closing lines: each side at its own fastest thread count (``best``: method -> (seconds,
    threads, accuracies))."""
    sk, lin, lin32 = (
        best[m]
        for m in (
            "sklearn LogisticRegression, 1 per layer (baseline)",
            "joint linear, L-BFGS (auto precision)",
            "joint linear, L-BFGS (float32)",
        )
    )
    print(
        f"\neach at its fastest thread count: joint linear L-BFGS {lin[0]:.3g} s ({lin[1]} threads) vs "
        f"sklearn {sk[0]:.3g} s ({sk[1]} threads): {sk[0] / lin[0]:.1f}x faster "
        f"(float32: {sk[0] / lin32[0]:.1f}x), mean test accuracy {lin[2].mean():.4f} "
        f"(float32 {lin32[2].mean():.4f}) vs {sk[2].mean():.4f}; target >= 10x at equal or better accuracy"
    )
    if not no_mlp:
        loop = best["torch MLP probe, 1 per layer in a loop (baseline)"]
        for m in ("joint MLP (all layers), batch 512", CURRENT_MLP):
            mlp = best[m]
            print(
                f"{m} vs MLP loop: {loop[0] / mlp[0]:.1f}x faster, mean accuracy "
                f"{mlp[2].mean():.4f} vs {loop[2].mean():.4f}"
            )
        old, new = best[PREVIOUS_MLP], best[CURRENT_MLP]
        print(
            f"MLP probes now vs before (float32, per-tensor Adam): {old[0] / new[0]:.2f}x faster, mean accuracy "
            f"{new[2].mean():.4f} vs {old[2].mean():.4f}"
        )


if __name__ == "__main__":
    main()
