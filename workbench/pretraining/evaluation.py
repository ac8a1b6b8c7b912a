"""Held-out evaluation of a pretraining run: what the trainer logs at every ``eval_every`` steps
(:func:`evaluate`), the same score of any checkpoint or exported copy afterwards
(:func:`heldout_loss`), and the unigram baseline to compare it with (:func:`unigram_baseline`).

The held-out batches have static masks (seeded by the run's seed and the row), so evaluations at
different steps, and of different models of one run, score the same targets.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.distributed as dist

from bertology.pretraining.config import PretrainConfig
from bertology.pretraining.data import Masker, SequenceSet, heldout_batches, read_run_data
from bertology.pretraining.masking import IGNORE_INDEX, mix_seed
from bertology.pretraining.objectives import OWN_EVALUATION, PretrainingLoss, evaluate_variant, pair_task, perplexity
from bertology.pretraining.runtime import Runtime

__all__ = ["evaluate", "heldout_loss", "unigram_baseline", "heldout_sentences", "ORDINARY_ENGLISH"]

# The held-out sources of scripts/build_english_corpus.py that are ordinary running prose (news,
# fiction, essays; State of the Union addresses) -- not dictionary glosses, verse or manuals.
ORDINARY_ENGLISH = ("brown", "sotu")


@torch.no_grad()
def evaluate(
    model, data: SequenceSet, masker: Masker, cfg: PretrainConfig, rt: Runtime, pad_id: int
) -> dict[str, float]:
    """Held-out MLM loss (mean over masked tokens, nats), perplexity, and NSP/SOP accuracy.

    Masks are static (seeded by ``seed`` and the row), so evaluations at different steps compare.
    Rows are sharded across processes and the sums all-reduced.
    """
    if cfg.objective in OWN_EVALUATION:  # ELECTRA and SpanBERT report their extra terms
        return evaluate_variant(
            cfg,
            model,
            heldout_batches(data, masker, cfg, pad_id, rt.rank, rt.world_size),
            rt.device,
            rt.autocast_dtype,
            rt.world_size,
            seed=mix_seed(cfg.seed, 6),
        )
    was_training = model.training
    model.eval()
    sums = torch.zeros(4, dtype=torch.float64)  # loss sum, masked count, pair correct, pair count
    objective = PretrainingLoss(model)
    for rows, batch, ids, labels in heldout_batches(data, masker, cfg, pad_id, rt.rank, rt.world_size):
        with rt.autocast():
            _, mlm_sum, pair_logits = objective(
                ids.to(rt.device),
                batch["attention_mask"].to(rt.device),
                batch["token_type_ids"].to(rt.device),
                labels.to(rt.device),
                batch["pair_labels"].to(rt.device) if pair_task(cfg.objective) else None,
                reduction="sum",
            )
        sums[0] += float(mlm_sum)
        sums[1] += float((labels != IGNORE_INDEX).sum())
        if pair_logits is not None:
            sums[2] += float((pair_logits.argmax(-1).cpu() == batch["pair_labels"]).sum())
            sums[3] += len(rows)
    if rt.world_size > 1:
        dist.all_reduce(sums)
    model.train(was_training)
    loss = float(sums[0] / sums[1]) if sums[1] > 0 else float("nan")
    res = {"eval_loss": loss, "perplexity": perplexity(loss)}
    if pair_task(cfg.objective) and sums[3] > 0:
        res["eval_pair_accuracy"] = float(sums[2] / sums[3])
    return res


def heldout_loss(run_dir: str | Path, model_dir: str | Path) -> float:
    """The held-out MLM loss (nats per masked token, float32) of the model in ``model_dir`` on the
    run's evaluation targets: what :func:`evaluate` logs, for any checkpoint or exported copy."""
    from transformers import AutoModelForMaskedLM

    cfg, tok, _, heldout = read_run_data(Path(run_dir))
    model = AutoModelForMaskedLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    objective = PretrainingLoss(model)
    total, n = 0.0, 0
    with torch.inference_mode():
        for _, batch, ids, labels in heldout_batches(heldout, Masker(cfg, tok), cfg, tok.pad_token_id):
            _, mlm_sum, _ = objective(
                ids, batch["attention_mask"], batch["token_type_ids"], labels, None, reduction="sum"
            )
            total += float(mlm_sum)
            n += int((labels != IGNORE_INDEX).sum())
    return total / n


def unigram_baseline(run_dir: str | Path) -> dict[str, float]:
    """The held-out loss of predicting every masked token by its training-set frequency.

    Frequencies: token counts of the run's tokenised training sequences (add-one smoothed over the
    non-special vocabulary). Scored on exactly the masked targets :func:`evaluate` scores, so it
    compares with ``eval_loss``; also over every non-special held-out token. Nats per token.
    """
    cfg, tok, train, heldout = read_run_data(Path(run_dir))
    vocab = len(tok)
    special = torch.tensor(sorted(tok.all_special_ids))
    ordinary = torch.ones(vocab, dtype=torch.bool)
    ordinary[special] = False
    counts = torch.bincount(train.ids, minlength=vocab).double()
    counts[~ordinary] = 0
    logp = torch.full((vocab,), -math.inf, dtype=torch.float64)
    logp[ordinary] = ((counts[ordinary] + 1) / (counts[ordinary] + 1).sum()).log()
    total, n = 0.0, 0
    for _, _, _, labels in heldout_batches(heldout, Masker(cfg, tok), cfg, tok.pad_token_id):
        targets = labels[labels != IGNORE_INDEX]
        total += float(-logp[targets].sum())
        n += targets.numel()
    every = heldout.ids[ordinary[heldout.ids]]
    return {
        "unigram_eval_loss": total / n,
        "eval_targets": n,
        "unigram_loss_all_heldout_tokens": float(-logp[every].mean()),
        "heldout_tokens": int(every.numel()),
        "train_tokens": int(counts.sum()),
    }


MODERN_ENGLISH_GENRES = ("news", "dialogue", "instructions")


def modern_english_sentences(genre: str | None = None) -> list[str]:
    """The project's own held-out set of modern everyday English (``bertology/data/modern_english.txt``,
    written for issue 42 and never part of a training corpus): 50 news-like sentences, 50 of
    dialogue and 50 instructions, in file order; ``genre`` one of :data:`MODERN_ENGLISH_GENRES`
    (None: all 150). What "knows English beyond its corpus" is scored on (docs/pretraining.md)."""
    from bertology import paths
    from bertology.errors import CorpusError

    if genre is not None and genre not in MODERN_ENGLISH_GENRES:
        raise CorpusError(f"genre must be one of {', '.join(MODERN_ENGLISH_GENRES)}, not {genre!r}")
    path = paths.package_data() / "modern_english.txt"
    out: list[str] = []
    current = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("## "):
            current = line[3:].strip()
        elif line.strip() and not line.startswith("#"):
            if current is None:
                raise CorpusError(f"{path}, line {number}: a sentence before the first '## genre' line")
            if genre is None or current == genre:
                out.append(line.strip())
    return out


def heldout_sentences(
    corpus_dir: str | Path,
    *,
    sources: tuple[str, ...] = ORDINARY_ENGLISH,
    n: int | None = 400,
    seed: int = 0,
    min_words: int = 5,
    max_words: int = 60,
) -> list[str]:
    """Sentences of the held-out documents of a corpus made by ``scripts/build_english_corpus.py``
    (``<corpus_dir>/heldout/<source>.txt.gz``, one sentence per line): the lines of ``sources`` with
    ``min_words..max_words`` whitespace words, ``n`` of them drawn evenly across sources with a
    seeded RNG (all when ``n`` is None), in corpus order. What pseudo-log-likelihood is scored on
    (docs/pretraining.md, "An English model that knows English")."""
    import gzip
    import random

    from bertology.errors import CorpusError

    folder = Path(corpus_dir).expanduser() / "heldout"
    per_source: list[list[str]] = []
    for source in sources:
        path = folder / f"{source}.txt.gz"
        if not path.is_file():
            raise CorpusError(
                f"{path}: no held-out file for source {source!r} (build the corpus with "
                "bash scripts/setup.sh --with-pretraining-corpus)"
            )
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            lines = [ln.strip() for ln in fh if min_words <= len(ln.split()) <= max_words]
        per_source.append(lines)
    if n is None:
        return [ln for lines in per_source for ln in lines]
    rng = random.Random(seed)
    share = [n // len(sources) + (1 if i < n % len(sources) else 0) for i in range(len(sources))]
    chosen = []
    for lines, k in zip(per_source, share):
        if k > len(lines):
            raise CorpusError(f"{folder}: asked for {k} sentences of one source, it has {len(lines)}")
        chosen += [lines[i] for i in sorted(rng.sample(range(len(lines)), k))]
    return chosen
