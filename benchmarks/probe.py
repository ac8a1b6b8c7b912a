"""All-layer probing: probes of every layer trained jointly (one vectorised pass) vs one per layer.

Same features, same train/dev/test split, one process. Baselines: scikit-learn
``LogisticRegression`` fitted once per layer (linear probes), and the same torch probe trained once
per layer in a Python loop (MLP probes: isolates the gain from vectorising over layers). Prints
seconds, speed-up ratios (target >= 10x against scikit-learn at equal or better accuracy) and
test accuracies side by side.

Features: planted synthetic ``[7 layers, 20k words, 384 dims]`` with 17 labels whose signal
strength varies by layer (``--quick``: 5k words), or ``--real``: the MiniLM-L6 store over the
bundled Brown sample (gold UPOS).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table  # noqa: E402


def _data(args):
    from probes.synthetic import planted_task
    from probes.tasks import build_task

    if not args.real:
        strengths = {0: 0.10, 1: 0.16, 2: 0.22, 3: 0.25, 4: 0.22, 5: 0.18, 6: 0.12}
        d = planted_task(n_layers=7, n_words=5000 if args.quick else 20000, dim=384, n_labels=17,
                         signal_layers=strengths, seed=args.seed)
        return d.features, d.sentence_offsets, d.task, "synthetic planted"
    from workbench.corpus import load_corpus
    from workbench.models import load_model
    from workbench.store import extract

    corpus = load_corpus("brown-sample", limit=300 if args.quick else 1200)
    store = extract(load_model("minilm-l6", attentions=False), corpus, attentions=False)
    return store.layers(), store.sentence_offsets, build_task(corpus, "pos"), f"MiniLM-L6 x {corpus.name}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="5k words instead of 20k")
    parser.add_argument("--real", action="store_true", help="MiniLM-L6 features on the Brown sample (POS)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch and BLAS threads for both sides (0 = library defaults); 1 suits a shared machine")
    args = parser.parse_args()

    import torch
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    from probes.edge_probing import (ProbeConfig, _Features, classification_metrics, fit_joint,
                                     predict_logits, span_index)
    from probes.tasks import split_by_sentence

    if args.threads:
        from threadpoolctl import threadpool_limits

        torch.set_num_threads(args.threads)
        threadpool_limits(args.threads)
    feats, offsets, task, what = _data(args)
    L, W, D = feats.shape
    y = task.label_ids()
    K = len(task.labels)
    split = split_by_sentence(task, seed=args.seed)
    tokens, mask = span_index(task, offsets)
    data = _Features(feats, tokens, mask, True, args.device)
    words = tokens[:, 0, 0]
    tr, te = split["train"], split["test"]
    print(f"{what}: {L} layers x {W} words x {D} dims, {len(task)} examples, {K} labels, "
          f"train {len(tr)} / dev {len(split['dev'])} / test {len(te)}, torch threads {torch.get_num_threads()}")

    def joint(probe: str, layers: list[int]):
        cfg = ProbeConfig(probe=probe, lr=3e-3 if probe == "linear" else 1e-3, batch_size=512,
                          max_epochs=30, patience=3, device=args.device)
        mixing = np.eye(L, dtype=bool)[layers]
        fit = fit_joint(data, y, tr, split["dev"], n_labels=K, mixing=mixing, learned_mix=False,
                        config=cfg, seed=args.seed)
        return classification_metrics(predict_logits(fit.model, data, te), y[te], False)["accuracy"]

    def timed(fn):
        t0 = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - t0

    joint("linear", [0])  # warm-up (thread pools, allocator)
    acc_joint_lin, t_joint_lin = timed(lambda: joint("linear", list(range(L))))
    acc_joint_mlp, t_joint_mlp = timed(lambda: joint("mlp", list(range(L))))
    acc_loop_mlp, t_loop_mlp = timed(lambda: np.concatenate([joint("mlp", [l]) for l in range(L)]))

    def sklearn_per_layer():
        accs = []
        for l in range(L):
            X = feats[l][words]
            mu, sd = X[tr].mean(0), X[tr].std(0) + 1e-6
            Xs = (X - mu) / sd
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                clf = LogisticRegression(max_iter=300).fit(Xs[tr], y[tr])
            accs.append(clf.score(Xs[te], y[te]))
        return np.array(accs)

    acc_sk, t_sk = timed(sklearn_per_layer)

    rows = [
        {"method": "sklearn LogisticRegression, 1 per layer", "seconds": t_sk, "speed-up": 1.0,
         "mean acc": acc_sk.mean(), "best layer": int(acc_sk.argmax()), "best acc": acc_sk.max()},
        {"method": "workbench joint linear (all layers)", "seconds": t_joint_lin, "speed-up": t_sk / t_joint_lin,
         "mean acc": acc_joint_lin.mean(), "best layer": int(acc_joint_lin.argmax()), "best acc": acc_joint_lin.max()},
        {"method": "torch MLP probe, 1 per layer (loop)", "seconds": t_loop_mlp, "speed-up": t_sk / t_loop_mlp,
         "mean acc": acc_loop_mlp.mean(), "best layer": int(acc_loop_mlp.argmax()), "best acc": acc_loop_mlp.max()},
        {"method": "workbench joint MLP (all layers)", "seconds": t_joint_mlp, "speed-up": t_sk / t_joint_mlp,
         "mean acc": acc_joint_mlp.mean(), "best layer": int(acc_joint_mlp.argmax()), "best acc": acc_joint_mlp.max()},
    ]
    print_table(rows, "All-layer probing (speed-up vs scikit-learn, same process, same split)")
    print(f"\njoint linear vs sklearn: {t_sk / t_joint_lin:.1f}x faster, accuracy "
          f"{acc_joint_lin.mean():.3f} vs {acc_sk.mean():.3f}")
    print(f"joint MLP vs MLP loop: {t_loop_mlp / t_joint_mlp:.1f}x faster, accuracy "
          f"{acc_joint_mlp.mean():.3f} vs {acc_loop_mlp.mean():.3f}")
    per_layer = [{"layer": l, "sklearn LR": acc_sk[l], "joint linear": acc_joint_lin[l],
                  "MLP loop": acc_loop_mlp[l], "joint MLP": acc_joint_mlp[l]} for l in range(L)]
    print_table(per_layer, "Test accuracy per layer")


if __name__ == "__main__":
    main()
