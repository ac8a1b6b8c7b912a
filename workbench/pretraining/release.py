"""Package a pretraining run's checkpoints as a release the model registry ships.

``export_release(run_dir, out_dir, steps=...)`` copies the chosen checkpoints of a run made by
:func:`bertology.pretraining.trainer.run_pretraining` into ``out_dir/checkpoint-<step>/`` with the
model weights cast to float16 safetensors (the MLM head included; optimizer, scheduler and RNG
state left out), the tokenizer files and ``config.json`` as the trainer wrote them, plus
``release.json`` (steps, tokens seen, held-out loss at each kept step, the recipe, the corpus
manifest, hashes), the run's ``metrics.jsonl`` (training and held-out loss curves) and a model
card ``README.md``. Nothing else is changed: the weights are exactly
the trainer's, rounded to float16. ``bertology.models`` lists a release folder found under the
package's ``data/models/`` as ``<name>`` (last step) and ``<name>@<step>``.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from bertology.atomic import write_json, write_text
from bertology.checkpoints import atomic_dir, list_checkpoints
from bertology.errors import CheckpointError
from bertology.models import file_sha256
from bertology.pretraining.evaluation import heldout_loss

__all__ = ["export_release", "earlier_stretch", "read_release", "RELEASE_FILE"]

RELEASE_FILE = "release.json"
MODEL_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "merges.txt",
    "vocab.json",
)


def _to_float16(src: Path, dst: Path) -> int:
    """Copy a safetensors file with floating tensors cast to float16; returns the parameter count."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(src))
    out, n = {}, 0
    for name, t in tensors.items():
        n += t.numel()
        if t.is_floating_point():
            if t.abs().max().item() > torch.finfo(torch.float16).max:
                raise CheckpointError(f"{src}: tensor {name} exceeds the float16 range; keep float32")
            t = t.to(torch.float16)
        out[name] = t.contiguous()
    save_file(out, str(dst), metadata={"format": "pt"})
    return n


def _eval_losses(run_dir: Path) -> dict[int, float]:
    losses = {}
    path = run_dir / "metrics.jsonl"
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            if "eval_loss" in event:
                losses[int(event["step"])] = float(event["eval_loss"])
    return losses


def earlier_stretch(run_dir: str | Path) -> dict[str, Any]:
    """What a finished earlier stretch of a model's training contributes to a later release: its run
    name, config, last step, sequences seen and held-out losses (``stretches`` of :func:`export_release`)."""
    run_dir = Path(run_dir)
    info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    checkpoints = list_checkpoints(run_dir)
    if not checkpoints:
        raise CheckpointError(f"{run_dir}: no checkpoint (the earlier stretch did not finish)")
    step, path = checkpoints[-1]
    state = json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
    events = (
        [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
        if (run_dir / "metrics.jsonl").is_file()
        else []
    )
    return {
        "run": info["config"]["run_name"],
        "config": info["config"],
        "steps": step,
        "sequences_seen": int(state.get("sequences_seen", 0)),
        "eval_losses": _eval_losses(run_dir),
        "events": events,
    }


def release_stretches(release_dir: str | Path) -> list[dict[str, Any]]:
    """The stretches of a shipped multi-stretch release (``release.json`` + ``metrics.jsonl``), in the
    form :func:`earlier_stretch` gives for a run folder, oldest first: a later stretch can continue
    a released model whose earlier run folders are gone. The per-stretch configs are
    ``stretch_configs`` (written since the third stretch of ``minilm-english-mlm``) or, for a
    two-stretch release, ``recipe_first_stretch`` and ``recipe``."""
    release_dir = Path(release_dir)
    release = json.loads((release_dir / RELEASE_FILE).read_text(encoding="utf-8"))
    rows = release.get("stretches")
    if not rows:
        raise CheckpointError(f"{release_dir / RELEASE_FILE}: no 'stretches' (a single-stretch release)")
    configs = release.get("stretch_configs")
    if configs is None:
        if len(rows) != 2:
            raise CheckpointError(f"{release_dir / RELEASE_FILE}: {len(rows)} stretches but no 'stretch_configs'")
        configs = [release["recipe_first_stretch"], release["recipe"]]
    losses = {int(k): float(v) for k, v in release.get("eval_losses", {}).items()}
    metrics = release_dir / "metrics.jsonl"
    events = (
        [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
        if metrics.is_file()
        else []
    )
    out = []
    for k, (row, config) in enumerate(zip(rows, configs, strict=True), 1):
        before = int(row["first_step"]) - 1
        last = int(row["last_step"])
        low = before if k == 1 else before + 1  # a stretch's step 0 is the previous stretch's end
        out.append(
            {
                "run": row["run"],
                "config": config,
                "steps": last - before,
                "sequences_seen": int(row["sequences"]),
                "eval_losses": {step - before: v for step, v in losses.items() if low <= step <= last},
                "events": [
                    {key: v for key, v in {**e, "step": int(e["step"]) - before}.items() if key != "stretch"}
                    for e in events
                    if int(e.get("stretch", 0)) == k
                ],
            }
        )
    return out


def export_release(
    run_dir: str | Path,
    out_dir: str | Path,
    *,
    steps: Sequence[int] | None = None,
    name: str | None = None,
    card: dict[str, Any] | None = None,
    recipe: dict[str, Any] | None = None,
    score: bool = True,
    pll_texts: Sequence[str] | None = None,
    pll_source: str | None = None,
    earlier: Sequence[dict[str, Any]] = (),
) -> Path:
    """Write the release folder ``out_dir`` from ``run_dir``; returns ``out_dir``.

    ``steps``: which checkpoints to ship (default: every checkpoint the run kept). ``card``: extra
    facts for the model card and ``release.json`` (e.g. ``corpus`` manifest, ``unigram_baseline``,
    ``command``, ``licence``, ``description``). ``recipe``: the config the run ended with, when it was
    resumed with changed resumable fields (``max_steps``...); default the config in ``run.json``,
    which is kept as ``run_config_at_start`` either way. ``score``: measure every shipped checkpoint's
    held-out MLM loss as shipped (float16 weights, float32 compute) on the run's evaluation targets
    (:func:`~bertology.pretraining.evaluation.heldout_loss`): ``eval_loss``; the loss the trainer logged
    at that step, if it evaluated there, stays as ``eval_loss_logged``. ``pll_texts``: sentences to
    score every shipped checkpoint on by pseudo-log-likelihood (nats per piece and per word, bootstrap
    intervals over sentences; :mod:`bertology.pseudo_likelihood`), as shipped;
    ``pll_source`` says where they come from. ``earlier``: the stretches this run continued
    (:func:`earlier_stretch` of each, oldest first; the run started from the last one's weights): steps
    and tokens then count from the first stretch (this run's step s ships as ``checkpoint-<s + earlier
    steps>``), ``release.json`` lists every stretch (``stretches``) and ``metrics.jsonl`` holds every
    stretch's events on the common step axis (``stretch``: 1, 2, ...). Written atomically: a killed
    export leaves no folder.
    """
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    run_info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    available = dict(list_checkpoints(run_dir))
    steps = sorted(available) if steps is None else sorted(int(s) for s in steps)
    missing = [s for s in steps if s not in available]
    if missing or not steps:
        raise CheckpointError(f"{run_dir}: no checkpoint for step(s) {missing or steps}; have {sorted(available)}")
    losses = _eval_losses(run_dir)
    cfg = dict(recipe) if recipe else run_info["config"]
    card = dict(card or {})
    offset = sum(int(e["steps"]) for e in earlier)
    sequences_before = sum(int(e["sequences_seen"]) for e in earlier)
    entries = []
    with atomic_dir(out_dir) as tmp:
        for step in steps:
            src = available[step]
            dst = tmp / f"checkpoint-{step + offset}"
            dst.mkdir()
            n_params = _to_float16(src / "model.safetensors", dst / "model.safetensors")
            for f in MODEL_FILES:
                if (src / f).is_file():
                    shutil.copy2(src / f, dst / f)
            state = json.loads((src / "trainer_state.json").read_text(encoding="utf-8"))
            shipped_loss = heldout_loss(run_dir, dst) if score else None
            sequences = sequences_before + int(state.get("sequences_seen", 0))
            tokens = sequences * cfg["max_seq_len"]
            entries.append(
                {
                    "step": step + offset,
                    "sequences_seen": sequences,
                    "tokens_seen_at_most": tokens,
                    "eval_loss_logged": losses.get(step),
                    "eval_loss": shipped_loss if shipped_loss is not None else losses.get(step),
                    "eval_perplexity": math.exp(shipped_loss if shipped_loss is not None else losses[step])
                    if (shipped_loss is not None or step in losses)
                    else None,
                    "n_parameters": n_params,
                    "model_sha256": file_sha256(dst / "model.safetensors"),
                    **(_pll_entry(dst, pll_texts) if pll_texts else {}),
                }
            )
        if pll_texts:
            card["pll_texts"] = {"source": pll_source, "sentences": len(pll_texts)}
        release = {
            "name": name or out_dir.name,
            "format": "float16 safetensors (trainer weights rounded)",
            "checkpoints": entries,
            "final_step": steps[-1],
            "recipe": cfg,
            "run_config_at_start": run_info["config"],
            "run": {
                k: run_info.get(k)
                for k in (
                    "corpus",
                    "corpus_sha256",
                    "heldout_corpus",
                    "seed",
                    "world_size",
                    "n_train_sequences",
                    "n_eval_sequences",
                    "n_parameters",
                    "objective",
                    "created",
                )
            },
            "eval_losses": {str(k): v for k, v in sorted(_all_losses(earlier, losses, offset).items())},
            **card,
        }
        if earlier:
            release["stretches"] = _stretches(earlier, run_info["config"], cfg, entries, losses, offset)
            release["recipe_first_stretch"] = earlier[0]["config"]
            release["stretch_configs"] = [e["config"] for e in earlier] + [cfg]
            _write_all_metrics(earlier, run_dir, tmp / "metrics.jsonl", offset)
        elif (run_dir / "metrics.jsonl").is_file():  # the whole training curve, as the trainer logged it
            shutil.copy2(run_dir / "metrics.jsonl", tmp / "metrics.jsonl")
        write_json(tmp / RELEASE_FILE, release)
        write_text(tmp / "README.md", model_card(release))
    return out_dir


def _all_losses(earlier: Sequence[dict[str, Any]], losses: dict[int, float], offset: int) -> dict[int, float]:
    """Held-out losses of every stretch on the common step axis."""
    out: dict[int, float] = {}
    start = 0
    for stretch in earlier:
        out.update({start + int(k): float(v) for k, v in stretch["eval_losses"].items()})
        start += int(stretch["steps"])
    out.update({offset + k: v for k, v in losses.items()})
    return out


def _stretches(
    earlier: Sequence[dict[str, Any]],
    config: dict[str, Any],
    recipe: dict[str, Any],
    entries: list[dict[str, Any]],
    losses: dict[int, float],
    offset: int,
) -> list[dict[str, Any]]:
    """One row per stretch: run, started from, steps (cumulative), lr, warm-up, sequences, last held-out loss."""
    rows, start = [], 0
    for stretch in earlier:
        c = stretch["config"]
        end_loss = stretch["eval_losses"].get(int(stretch["steps"]))
        rows.append(
            {
                "run": stretch["run"],
                "init_from": c.get("init_from"),
                "first_step": start + 1,
                "last_step": start + int(stretch["steps"]),
                "learning_rate": c["learning_rate"],
                "warmup_steps": c["warmup_steps"],
                "stream_start": c.get("stream_start", 0),
                "corpus": c.get("corpus"),
                "sequences": stretch["sequences_seen"],
                "eval_loss_end": end_loss,
            }
        )
        start += int(stretch["steps"])
    last = entries[-1]
    rows.append(
        {
            "run": config["run_name"],
            "init_from": config.get("init_from"),
            "first_step": offset + 1,
            "last_step": last["step"],
            "learning_rate": recipe["learning_rate"],
            "warmup_steps": recipe["warmup_steps"],
            "stream_start": recipe.get("stream_start", 0),
            "corpus": recipe.get("corpus"),
            "sequences": last["sequences_seen"] - sum(int(e["sequences_seen"]) for e in earlier),
            "eval_loss_end": losses.get(last["step"] - offset),
        }
    )
    return rows


def _write_all_metrics(earlier: Sequence[dict[str, Any]], run_dir: Path, path: Path, offset: int) -> None:
    """Every stretch's metric events, steps on the common axis, each tagged with its stretch (1, 2, ...)."""
    lines, start = [], 0
    for k, stretch in enumerate(earlier, 1):
        lines += [json.dumps({**e, "step": start + int(e["step"]), "stretch": k}) for e in stretch["events"]]
        start += int(stretch["steps"])
    if (run_dir / "metrics.jsonl").is_file():
        lines += [
            json.dumps(
                {**json.loads(line), "stretch": len(earlier) + 1} | {"step": offset + int(json.loads(line)["step"])}
            )
            for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
    write_text(path, "\n".join(lines) + "\n")


def _pll_entry(model_dir: Path, texts: Sequence[str]) -> dict[str, Any]:
    """Pseudo-log-likelihood of the model in ``model_dir`` (float32 compute) on ``texts``."""
    from bertology.models import load_model
    from bertology.pseudo_likelihood import pll_summary, pseudo_log_likelihood

    lm = load_model(model_dir, attentions=False, mlm_head=True, dtype=torch.float32)
    summary = pll_summary(pseudo_log_likelihood(lm, texts, progress=True))
    piece, word = summary["nats_per_piece"], summary["nats_per_word"]
    return {
        "pll_nats_per_piece": piece.estimate,
        "pll_nats_per_piece_ci": [piece.low, piece.high],
        "pll_nats_per_word": word.estimate,
        "pll_nats_per_word_ci": [word.low, word.high],
        "pll_pieces": summary["pieces"],
        "pll_words": summary["words"],
    }


def _first_init(release: dict[str, Any]) -> str:
    """The model the first stretch started from (the recipe's own ``init_from`` for one stretch)."""
    first = release.get("recipe_first_stretch") or release["recipe"]
    return str(first.get("init_from"))


def read_release(folder: str | Path) -> dict[str, Any]:
    """The ``release.json`` of a release folder."""
    path = Path(folder) / RELEASE_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: unreadable release manifest ({exc})") from exc


def model_card(release: dict[str, Any]) -> str:
    """A Markdown model card from a release manifest."""
    lines = _card_summary(release) + _card_stretches(release) + _card_checkpoints(release)
    if "command" in release:
        lines += ["", "## Reproduce", "", "```bash", release["command"], "```"]
    if "notes" in release:
        lines += ["", "## Notes", "", release["notes"]]
    return "\n".join(lines) + "\n"


def _card_summary(release: dict[str, Any]) -> list[str]:
    """The model card's title, description and summary table (architecture, parameters, start,
    objective, optimisation, tokens, held-out loss; unigram baseline, corpus, licence when recorded)."""
    cfg, run = release["recipe"], release["run"]
    final = release["checkpoints"][-1]
    lines = [
        f"# {release['name']}",
        "",
        release.get("description", "A small English BERT pretrained by the BERTology workbench's own trainer."),
        "",
        "| | |",
        "|---|---|",
        f"| architecture | BERT, {cfg['num_hidden_layers']} layers, {cfg['num_attention_heads']} heads, hidden "
        f"{cfg['hidden_size']}, FFN {cfg['intermediate_size']}, max length {cfg['max_seq_len']}, MLM head |",
        f"| parameters | {final['n_parameters']:,} (stored as {release['format']}) |",
        (
            f"| started from | `{_first_init(release)}` (its weights and tokenizer; continued MLM pretraining"
            + (f", in {len(release['stretches'])} stretches" if release.get("stretches") else "")
            + ") |"
            if cfg.get("init_from")
            else f"| tokenizer | {cfg['tokenizer_kind']} {'uncased' if cfg['lowercase'] else 'cased'}, vocabulary {cfg['vocab_size']:,} |"
        ),
        f"| objective | {cfg['objective']}, {cfg['masking']} masking {cfg['mlm_probability']:.0%} (80/10/10), "
        f"{'dynamic' if cfg['dynamic_masking'] else 'static'} masks |",
        f"| optimisation | AdamW lr {cfg['learning_rate']}, warm-up {cfg['warmup_steps']} steps, linear decay, "
        f"batch {cfg['batch_size']} x {cfg['grad_accum_steps']} x world {run.get('world_size')} sequences, "
        f"{cfg['max_steps']:,} steps, seed {cfg['seed']}"
        + (" (the last stretch; every stretch below) |" if release.get("stretches") else " |"),
        f"| tokens seen | at most {final['tokens_seen_at_most']:,} (sequences are packed up to {cfg['max_seq_len']} tokens) |",
        f"| held-out MLM loss | {final['eval_loss']:.3f} nats (perplexity {final['eval_perplexity']:.1f}) at step {final['step']:,} |"
        if final.get("eval_loss") is not None
        else "| held-out MLM loss | not measured |",
    ]
    if "unigram_baseline" in release:
        lines.append(
            f"| unigram baseline | {release['unigram_baseline']:.3f} nats (predicting every masked token by "
            "its training-set frequency) |"
        )
    if "corpus" in release:
        lines.append(f"| corpus | {release['corpus'].get('summary', '')} |")
    if "licence" in release:
        lines.append(f"| licence | {release['licence']} |")
    return lines


def _card_stretches(release: dict[str, Any]) -> list[str]:
    """The model card's "Training stretches" section (none for a release trained in one stretch)."""
    lines: list[str] = []
    if release.get("stretches"):
        lines += [
            "",
            "## Training stretches",
            "",
            "| stretch | run | started from | steps | lr (peak), warm-up | sequences read | held-out loss at its end |",
            "|---|---|---|---|---|---|---|",
        ]
        for k, row in enumerate(release["stretches"], 1):
            end = f"{row['eval_loss_end']:.3f}" if row.get("eval_loss_end") is not None else "—"
            lines.append(
                f"| {k} | `{row['run']}` | `{row['init_from']}` | {row['first_step']:,}–{row['last_step']:,} | "
                f"{row['learning_rate']}, {row['warmup_steps']} | {row['sequences']:,} (from stream position "
                f"{row['stream_start']:,}) | {end} |"
            )
        corpora = [row.get("corpus") for row in release["stretches"]]
        if len(set(corpora)) == 1:
            lines += [
                "",
                "Each stretch starts a fresh optimizer and schedule from the previous one's last weights (float32, "
                "in its run folder) and reads the next part of the same shuffled stream, so no text is read twice.",
            ]
        else:
            lines += [
                "",
                "Each stretch starts a fresh optimizer and schedule from the previous one's last weights. The "
                "stretches read different corpora: "
                + "; ".join(f"{k}: `{c}`" for k, c in enumerate(corpora, 1))
                + ". A stretch on another corpus reads a new shuffle of it, so text shared with an earlier "
                "stretch's corpus may be read again; the corpus row above is the last stretch's.",
            ]
    return lines


def _card_checkpoints(release: dict[str, Any]) -> list[str]:
    """The model card's "Checkpoints" section: per checkpoint its step, tokens, held-out loss, PLL
    scores when measured and registry name; a note on the PLL measure."""
    pll = "pll_texts" in release
    lines = [
        "",
        "## Checkpoints",
        "",
        "| step | tokens seen (at most) | held-out loss |"
        + (" PLL nats/piece [95%] | PLL nats/word [95%] |" if pll else "")
        + " registry name |",
        "|---|---|---|" + ("---|---|" if pll else "") + "---|",
    ]
    for e in release["checkpoints"]:
        loss = f"{e['eval_loss']:.3f}" if e.get("eval_loss") is not None else "—"
        scores = ""
        if pll:
            scores = "".join(
                f" {e[k]:.2f} [{e[k + '_ci'][0]:.2f}, {e[k + '_ci'][1]:.2f}] |" if k in e else " — |"
                for k in ("pll_nats_per_piece", "pll_nats_per_word")
            )
        lines.append(
            f"| {e['step']:,} | {e['tokens_seen_at_most']:,} | {loss} |{scores} `{release['name']}@{e['step']}` |"
        )
    if pll:
        texts = release["pll_texts"]
        lines += [
            "",
            f"PLL: pseudo-log-likelihood (Salazar et al. 2020; every word piece masked in turn), nats per "
            f"piece and per whitespace word, on {texts['sentences']} held-out sentences ({texts['source']}); "
            "95% bootstrap intervals over sentences. Per word compares models with different tokenizers.",
        ]
    return lines
