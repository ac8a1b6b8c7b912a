"""Fine-tuning throughput: the workbench's trainer (`bertology.finetuning.run_finetuning`, on the
pretraining loop) against a minimal Hugging Face training loop, same model, task, batches and
threads, in one process.

The minimal loop is what a person writes by hand: ``AutoModelForTokenClassification``, AdamW, forward
with ``labels=``, backward, clip, step -- no evaluation, no checkpoints, no logging. It runs twice:
over the first training examples in file order, padded per batch (what a person would feed it), and
over exactly the batches the trainer draws (its shuffled stream and collation), so that the
comparison with the trainer is on the same padded positions. The trainer runs ``full`` fine-tuning
for the same number of steps with a dev evaluation at the end and its checkpoints; its throughput
is read from its own log windows (non-padding tokens per second of the training steps; evaluation
and checkpoint time are excluded by the loop). All count non-padding tokens; the table gives each
row's share of padded positions.

    python benchmarks/finetune.py                       # MiniLM-L6, POS, 24 steps of 32 sentences
    python benchmarks/finetune.py --steps 40 --threads 2
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from common import print_table


def file_order_batches(task, tokenizer, steps: int, batch_size: int, max_seq_len: int) -> list:
    """``steps + 2`` batches of consecutive training examples, encoded as a person would by hand."""
    label_id = {label: i for i, label in enumerate(task.labels)}
    examples = task.split("train")
    batches = []
    for start in range(0, (steps + 2) * batch_size, batch_size):
        chunk = [examples[i % len(examples)] for i in range(start, start + batch_size)]
        enc = tokenizer(
            [list(e.words) for e in chunk],
            is_split_into_words=True,
            truncation=True,
            max_length=max_seq_len,
            padding=True,
            return_tensors="pt",
        )
        labels = torch.full(enc["input_ids"].shape, -100)
        for row, e in enumerate(chunk):
            seen = set()
            for position, word in enumerate(enc.word_ids(row)):
                if word is not None and word not in seen:  # the first piece of each word, as BERT for NER
                    labels[row, position] = label_id[e.label[word]]
                    seen.add(word)
        batches.append(
            (
                {
                    "input_ids": enc["input_ids"],
                    "attention_mask": enc["attention_mask"],
                    "token_type_ids": enc.get("token_type_ids"),
                },
                labels,
            )
        )
    return batches


def trainer_batches(task, tokenizer, steps: int, batch_size: int, max_seq_len: int, seed: int = 0) -> list:
    """The first ``steps + 2`` batches the trainer draws (its shuffled stream, its collation), so a
    loop fed with them pads exactly as the trainer does."""
    from bertology.finetuning.data import collate, encode_split
    from bertology.pretraining.data import stream_indices

    train = encode_split(task.split("train"), task, tokenizer, max_seq_len)
    batches = []
    for step in range(steps + 2):
        rows, _ = stream_indices(len(train), seed, step * batch_size, batch_size)
        batch = collate(train, rows, tokenizer.pad_token_id)
        labels = batch.pop("labels")
        batches.append((batch, labels))
    return batches


def padding_share(batches: list) -> float:
    """Padded positions / all positions of the timed batches (after the two warm-up ones)."""
    masks = [enc["attention_mask"] for enc, _ in batches[2:]]
    return 1.0 - sum(int(m.sum()) for m in masks) / sum(m.numel() for m in masks)


def minimal_loop(model_dir: Path, n_labels: int, batches: list, lr: float) -> dict:
    """Tokens per second of a bare HF loop over ``batches`` (the first two are warm-up, not timed)."""
    from transformers import AutoModelForTokenClassification

    model = AutoModelForTokenClassification.from_pretrained(str(model_dir), num_labels=n_labels)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    tokens, elapsed = 0, 0.0
    for step, (enc, labels) in enumerate(batches):
        started = time.perf_counter()
        out = model(
            input_ids=enc["input_ids"],
            attention_mask=enc["attention_mask"],
            token_type_ids=enc.get("token_type_ids"),
            labels=labels,
        )
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= 2:  # two warm-up steps
            elapsed += time.perf_counter() - started
            tokens += int(enc["attention_mask"].sum())
    return {"tokens_per_s": tokens / elapsed, "steps": len(batches) - 2}


def workbench_trainer(model: str, steps: int, batch_size: int, max_seq_len: int, lr: float, threads: int) -> dict:
    """Tokens per second of ``run_finetuning`` (full mode, POS), from its log windows after the first."""
    from bertology.finetuning import FinetuneConfig, run_finetuning

    with tempfile.TemporaryDirectory() as root:
        run_dir = run_finetuning(
            FinetuneConfig(
                run_name="bench",
                model=model,
                task="pos",
                mode="full",
                max_steps=steps,
                batch_size=batch_size,
                max_seq_len=max_seq_len,
                learning_rate=lr,
                log_every=max(1, steps // 4),
                num_threads=threads,
                device="cpu",
                output_root=root,
                progress=False,
            )
        )
        events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    windows = [e["tokens_per_s"] for e in events if "tokens_per_s" in e]
    later = windows[1:] or windows
    return {"tokens_per_s": sum(later) / len(later), "steps": steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from bertology.finetuning import build_task
    from bertology.finetuning.heads import load_tokenizer
    from bertology.models import resolve

    lr = 5e-5
    _, model_dir = resolve(args.model)
    task = build_task("pos", seed=0)
    tokenizer = load_tokenizer(model_dir)
    in_file_order = file_order_batches(task, tokenizer, args.steps, args.batch_size, args.max_seq_len)
    as_trainer = trainer_batches(task, tokenizer, args.steps, args.batch_size, args.max_seq_len)
    hf = minimal_loop(model_dir, len(task.labels), in_file_order, lr)
    hf_same = minimal_loop(model_dir, len(task.labels), as_trainer, lr)
    ours = workbench_trainer(args.model, args.steps, args.batch_size, args.max_seq_len, lr, args.threads)
    # the trainer's log windows skip its first window; its batches pad as `as_trainer` does
    rows = [
        ("minimal HF loop, examples in file order", hf, padding_share(in_file_order)),
        ("minimal HF loop, the trainer's batches", hf_same, padding_share(as_trainer)),
        ("bertology trainer (full fine-tuning)", ours, padding_share(as_trainer)),
    ]
    print_table(
        [
            {
                "loop": name,
                "padding": f"{pad:.0%}",
                "tokens/s": round(r["tokens_per_s"]),
                "vs minimal (same batches)": f"{r['tokens_per_s'] / hf_same['tokens_per_s']:.2f}x",
            }
            for name, r, pad in rows
        ],
        f"Fine-tuning throughput: {args.model}, POS, batch {args.batch_size}, {args.steps} steps, "
        "non-padding tokens per second",
    )


if __name__ == "__main__":
    main()
