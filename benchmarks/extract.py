"""Feature-store extraction speed vs a naive one-sentence-at-a-time HF loop, and the CPU roofline.

Run: ``python benchmarks/extract.py [--quick] [--sentences N] [--model minilm-l6]``
Both paths produce every layer's hidden states and attention maps at word level for the same
sentences with the same model, in one process.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import matmul_flops_per_second, print_table, timed  # noqa: E402

from workbench.corpus import load_corpus  # noqa: E402
from workbench.models import load_model  # noqa: E402
from workbench.store import extract  # noqa: E402


def naive_loop(lm, corpus):
    """What a notebook does: tokenize and run one sentence at a time, pool first pieces in Python."""
    out = []
    for s in corpus:
        enc = lm.tokenizer(s.words, is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            res = lm.model(**enc, output_hidden_states=True, output_attentions=True)
        word_ids = enc.word_ids()
        first = [word_ids.index(w) for w in range(len(s.words))]
        hidden = torch.stack(res.hidden_states)[:, 0, first]
        att = torch.stack(res.attentions)[:, 0]
        out.append((hidden.numpy(), att.numpy()))
    return out


def forward_flops_per_token(config, seq_len: float) -> float:
    d, f, L = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    per_layer = 2 * (4 * d * d + 2 * d * f) + 2 * 2 * seq_len * d  # projections + FFN + QK^T and AV
    return L * per_layer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="200 sentences")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--model", default="minilm-l6")
    args = parser.parse_args()
    n = 200 if args.quick else args.sentences
    lm = load_model(args.model)
    corpus = load_corpus("brown-sample", limit=n)
    n_words = corpus.n_words
    n_tokens = sum(len(lm.tokenizer(s.words, is_split_into_words=True)["input_ids"]) for s in corpus)

    naive_loop(lm, corpus.subset(5))  # warm-up
    _, t_naive = timed(naive_loop, lm, corpus)
    with tempfile.TemporaryDirectory() as root:
        _, t_store = timed(extract, lm, corpus, root=root, progress=False)
    with tempfile.TemporaryDirectory() as root:
        _, t_hidden = timed(extract, lm, corpus, root=root, attentions=False, progress=False)
    with tempfile.TemporaryDirectory() as root:
        _, t_bf16 = timed(extract, lm, corpus, root=root, attentions=True, amp_dtype="bfloat16", progress=False)

    rate = matmul_flops_per_second()
    flops_word = forward_flops_per_token(lm.config, n_tokens / len(corpus)) * n_tokens / n_words
    roofline = rate / flops_word
    rows = [
        {"method": "naive HF loop (1 sentence/forward)", "seconds": t_naive, "words/s": n_words / t_naive,
         "× naive": 1.0, "% roofline": 100 * n_words / t_naive / roofline},
        {"method": "feature store (hidden + attention)", "seconds": t_store, "words/s": n_words / t_store,
         "× naive": t_naive / t_store, "% roofline": 100 * n_words / t_store / roofline},
        {"method": "feature store (hidden only)", "seconds": t_hidden, "words/s": n_words / t_hidden,
         "× naive": t_naive / t_hidden, "% roofline": 100 * n_words / t_hidden / roofline},
        {"method": "feature store (hidden + attention, bf16 autocast)", "seconds": t_bf16,
         "words/s": n_words / t_bf16, "× naive": t_naive / t_bf16, "% roofline": 100 * n_words / t_bf16 / roofline},
        {"method": "CPU roofline (float32 forward FLOPs ÷ matmul rate)", "seconds": n_words / roofline,
         "words/s": roofline, "× naive": roofline / (n_words / t_naive), "% roofline": 100.0},
    ]
    print_table(rows, f"extraction: {args.model}, {len(corpus)} sentences, {n_words} words, {n_tokens} tokens, "
                      f"{torch.get_num_threads()} threads, matmul {rate / 1e9:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
