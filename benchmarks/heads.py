"""Head importance: one backward pass per batch (Michel et al.) vs one-head-at-a-time ablation.

Same model, same data, one run each. Prints seconds, the speed-up ratio (target ≥ 20×) and the
Spearman correlation of the two rankings. Default: the real MiniLM-L6 (72 heads) with a POS
tagging head on the bundled Brown sample; ``--quick`` uses fewer sentences.

``--mlm`` (a model whose weights carry an MLM head, e.g. ``--model bert-mini-english``): the task is
the model's own MLM loss, and a second table times gradient importance with
:func:`~bertology.probes.heads.importance.mlm_loss` (vocabulary logits at the masked positions
only) against the same loss from the HF model's full logits (best of 3, taking turns), with the
largest difference of the two importance tables.
"""

from __future__ import annotations

import argparse
import time

from common import machine_line
from scipy.stats import spearmanr


def full_logits_mlm_loss(model, batch):
    """The baseline: per-example MLM loss from the HF ``*ForMaskedLM`` logits at every position."""
    from bertology.probes.heads.importance import model_inputs, token_cross_entropy

    return token_cross_entropy(model(**model_inputs(batch)).logits, batch["labels"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer sentences")
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mlm", action="store_true", help="the model's own MLM loss (needs an MLM head)")
    args = parser.parse_args()
    print(machine_line())

    from bertology.corpus import load_corpus
    from bertology.models import load_model
    from bertology.probes.heads.importance import ablation_importance, importance_scores
    from bertology.probes.heads.pruning import pos_task

    lm = load_model(args.model, attentions=True, mlm_head=args.mlm)
    corpus = load_corpus("brown-sample", limit=40 if args.quick else 160)
    train, _, loss_fn, _, task = pos_task(lm, corpus, eval_share=0.1, seed=args.seed, epochs=10 if args.quick else 30)
    importance_scores(lm.model, train[:1], loss_fn)  # warm-up (thread pools, autograd) for both methods
    start = time.perf_counter()
    grad = importance_scores(lm.model, train, loss_fn, normalise=False)
    t_grad = time.perf_counter() - start
    start = time.perf_counter()
    brute = ablation_importance(lm.model, train, loss_fn)
    t_brute = time.perf_counter() - start
    rho = spearmanr(grad["importance"], brute["importance"]).statistic
    rho_signed = spearmanr(grad["importance"], brute["loss_increase"]).statistic
    n_heads = len(grad)
    print(f"model {lm.name}, {n_heads} heads, task: {task}, {len(corpus)} sentences in {len(train)} batches")
    print(f"{'method':<34}{'seconds':>10}{'ratio':>10}")
    print(f"{'ablation (1 + heads forwards)':<34}{t_brute:>10.2f}{1.0:>10.1f}")
    print(f"{'gradient (1 backward per batch)':<34}{t_grad:>10.2f}{t_brute / t_grad:>10.1f}")
    print(f"Spearman(gradient, ablation E|ΔL|) = {rho:.3f}; vs signed loss increase = {rho_signed:.3f}")
    if args.mlm:
        from bertology.probes.heads.importance import mlm_loss

        best = {"full logits (HF *ForMaskedLM .logits)": float("inf"), "masked positions only (mlm_loss)": float("inf")}
        tables = {}
        for _ in range(3):
            for name, fn in zip(best, (full_logits_mlm_loss, mlm_loss)):
                start = time.perf_counter()
                tables[name] = importance_scores(lm.model, train, fn, normalise=False)
                best[name] = min(best[name], time.perf_counter() - start)
        base, ours = best.values()
        diff = (tables[list(best)[0]]["importance"] - tables[list(best)[1]]["importance"]).abs().max()
        print(f"\ngradient importance with the MLM loss, vocabulary {lm.model.config.vocab_size} (best of 3)")
        print(f"{'MLM logits':<40}{'seconds':>10}{'ratio':>10}")
        for name, t in best.items():
            print(f"{name:<40}{t:>10.2f}{base / t:>10.2f}")
        print(f"largest |importance difference|: {diff:.2e}")
    print(machine_line())


if __name__ == "__main__":
    main()
