"""Quantization of the encoder's Linear layers: size, CPU speed and quality against float32.

Same model, same batches, same threads, one process: float32, real dynamic int8
(``torch.ao.quantization.quantize_dynamic``, torch's int8 kernels; weight scales per tensor, torch's
default, and per output channel) and simulated b-bit weights
(quantize-dequantized to float32: quality and theoretical packed size only, no speed-up). Default:
MiniLM-L6 on 48 Brown-sample sentences, float32 vs the two int8 vs simulated 4-bit. MiniLM has no MLM head,
so its MLM loss is n/a; ``--model bert-mini-english`` (the workbench's own MLM-headed BERT) adds it.

    python benchmarks/quantize.py                         # MiniLM-L6, 48 sentences
    python benchmarks/quantize.py --bits 8 4 3 2 --group-size 32 --model bert-mini-english

Time is the median of ``--repeat`` forward passes of the encoder over all batches (wall and process
CPU seconds; after a warm-up round; every setting takes its turn in each round);
a speed-up (float32 wall / wall, and float32 CPU / CPU seconds, steadier on a shared machine) is
printed only for real int8 kernels. Quality: the relative change ``‖h' - h‖ / ‖h‖`` of
each token's hidden state (max over layers and tokens, mean over tokens averaged over layers), and
"sentence cos", the mean cosine of the mean-pooled last layer against float32.
"""

from __future__ import annotations

import argparse

import torch
from common import print_table


def speedup_text(row) -> str:
    """The measured speed-up for real kernels; simulated weights run float32 kernels."""
    if not row.real_kernels:
        return "none (simulated)"
    return "n/a" if row.speedup != row.speedup else f"{row.speedup:.2f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--sentences", type=int, default=48)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--bits", type=int, nargs="+", default=[4], help="simulated weight bits (2..8)")
    parser.add_argument("--group-size", type=int, default=None, help="input columns per scale (default: per channel)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from bertology.corpus import load_corpus
    from bertology.models import load_model
    from bertology.probes.compression import QuantSetting, compare_quantization, encode_sentences
    from bertology.probes.heads.importance import mask_batches

    lm = load_model(args.model, attentions=False)
    has_mlm = lm.has_mlm_head  # the weights carry an MLM head: load it too, for the MLM loss
    if has_mlm:
        lm = load_model(args.model, attentions=False, mlm_head=True)
    sentences = load_corpus("brown-sample", limit=args.sentences).sentences
    batches = encode_sentences(lm.tokenizer, sentences, batch_size=args.batch_size)
    mlm_batches = None
    if has_mlm:
        tok = lm.tokenizer
        mlm_batches = mask_batches(
            batches, tok.mask_token_id, lm.model.config.vocab_size, tok.all_special_ids, seed=args.seed
        )
    settings = [
        QuantSetting("float32"),
        QuantSetting("int8-dynamic"),
        QuantSetting("int8-dynamic", per_channel=True),
        *(QuantSetting("simulated", b, args.group_size) for b in args.bits),
    ]
    summary, layers = compare_quantization(
        lm.model, batches, settings=settings, mlm_batches=mlm_batches, repeat=args.repeat
    )
    tokens = int(sum(b["attention_mask"].sum() for b in batches))
    base_cpu = float(summary.loc[summary["kind"] == "float32", "cpu_seconds"].iloc[0])
    rows = [
        {
            "setting": r.setting,
            "size MB": r.size_bytes / 1e6,
            "size": r.size_kind,
            "x float32": r.size_ratio,
            "MLM loss": "n/a (no MLM head)" if mlm_batches is None else f"{r.mlm_loss:.4f}",
            "max rel. change": r.max_relative_change,
            "mean rel. change": r.mean_relative_change,
            "sentence cos": r.pooled_cosine,
            "forward s": r.seconds,
            "CPU s": r.cpu_seconds,
            "speed-up": speedup_text(r),
            "CPU-time ratio": f"{base_cpu / r.cpu_seconds:.2f}x" if r.real_kernels and r.cpu_seconds > 0 else "-",
        }
        for r in summary.itertuples()
    ]
    print_table(
        rows,
        f"Quantization of {lm.name}'s encoder Linear layers: {len(sentences)} Brown-sample sentences, "
        f"{tokens} tokens in {len(batches)} batches, {torch.get_num_threads()} threads, "
        f"median of {args.repeat} forwards, settings taking turns",
    )
    for r in summary.itertuples():
        print(f"  {r.setting}: {r.note}")
    wide = layers.pivot(index="layer", columns="setting", values="max_relative_change")
    print("\nmax relative change of hidden states per layer (0 = embeddings) vs float32:")
    print(wide[[s.name for s in settings if s.name in wide.columns]].to_string(float_format=lambda v: f"{v:.2e}"))


if __name__ == "__main__":
    main()
