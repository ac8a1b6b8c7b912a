"""The ``patching`` study's analysis: where a masked-language model carries the subject's number to
the verb, by activation patching over subject-verb agreement minimal pairs
(:mod:`bertology.probes.patching.minimal_pairs`, :mod:`bertology.probes.patching.patch`).

:func:`patching_analysis` (config :data:`PATCHING_DEFAULTS`) patches every hidden state (layer x
token) and every head (layer x head, at every token) of each pair's clean run into its corrupted
run (``direction: denoising``; ``noising`` copies the corrupted run's activation into the clean run
instead), and averages the restored (or destroyed) fraction over pairs with intervals over pairs.

Whether the model can do the task at all comes first: its clean accuracy (the right verb preferred
for the clean sentence; chance 1/2, the clean subject being singular or plural at random) has a
Wilson interval, and when that interval reaches down to chance the study warns and names no site as
carrying number (``number_carriers`` is not written). By default only the pairs the model gets right
in both sentences enter the means (``use_pairs: correct``, as Finlayson et al. 2021), and a randomly
initialised copy of the model is scored and patched on the same pairs (``random_init_control``): its
accuracy and its own maps, the picture a model that has learnt nothing gives.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pandas as pd

from bertology.errors import ConfigError, ModelError
from bertology.models import LoadedModel, load_model, random_init_like, resolve_device
from bertology.numbering import head_number, layer_number
from bertology.probes.patching.minimal_pairs import ROLE_ORDER, TEMPLATES, VERBS, AgreementPair, agreement_pairs
from bertology.probes.patching.patch import (
    DIRECTIONS,
    encode_pair,
    head_scores,
    hidden_state_scores,
    pair_scores,
    swapped,
)
from bertology.progress import progress_bar
from bertology.runs import StudyContext
from bertology.uncertainty import ratio_bootstrap, t_interval, wilson_interval

__all__ = ["PATCHING_DEFAULTS", "CHANCE", "patching_analysis", "summarise_sites", "pair_accuracy", "able"]

CHANCE = 0.5  # two verb forms, the clean subject singular or plural at random

PATCHING_DEFAULTS: dict[str, Any] = {
    "model": "minilm-english-mlm",  # needs an MLM head: the masked verb is scored
    "pairs": 120,  # minimal pairs drawn (fewer if the tokenizer splits too many template words)
    "templates": list(TEMPLATES),  # pp, object_rc, subject_rc
    "verbs": list(VERBS),  # is/are, was/were, has/have
    "flip": "subject",  # subject: only the subject's number differs | both: the attractor's too
    "use_pairs": "correct",  # correct: only pairs the model gets right in both sentences (Finlayson et al.) | all
    "min_difference": 0.1,  # nats: pairs whose clean - corrupted score difference is smaller are left out
    "direction": "denoising",  # denoising: clean into corrupted (restored) | noising: corrupted into clean (destroyed)
    "random_init_control": True,  # also score the pairs with a randomly initialised copy of the model
    "carry_threshold": 0.1,  # a site carries number when the low end of its interval exceeds this
    "confidence": 0.95,
    "batch_rows": 256,  # patched rows per forward
    "device": "cpu",
    "seed": 0,
}


def _check(cfg: dict[str, Any]) -> None:
    if int(cfg["pairs"]) < 2:
        raise ConfigError(f"patching: field 'pairs' must be at least 2, got {cfg['pairs']!r}")
    if cfg["use_pairs"] not in ("correct", "all"):
        raise ConfigError(f"patching: field 'use_pairs' must be 'correct' or 'all', got {cfg['use_pairs']!r}")
    if float(cfg["min_difference"]) <= 0:
        raise ConfigError(f"patching: field 'min_difference' must be > 0 nats, got {cfg['min_difference']!r}")
    if not 0 < float(cfg["confidence"]) < 1:
        raise ConfigError(f"patching: field 'confidence' must be between 0 and 1, got {cfg['confidence']!r}")
    if int(cfg["batch_rows"]) < 1:
        raise ConfigError(f"patching: field 'batch_rows' must be >= 1, got {cfg['batch_rows']!r}")
    if cfg.get("direction", "denoising") not in DIRECTIONS:
        raise ConfigError(
            f"patching: field 'direction' must be one of {', '.join(DIRECTIONS)}, got {cfg.get('direction')!r}"
        )


def _used(row: dict[str, Any], cfg: dict[str, Any]) -> bool:
    """Whether a pair enters the means: a clean - corrupted difference of at least ``min_difference``
    (in the right direction: the clean sentence favours the target more) and, with ``use_pairs:
    correct``, the right verb preferred in both sentences."""
    enough = row["clean_score"] - row["corrupted_score"] >= float(cfg["min_difference"])
    correct = row["clean_correct"] and row["corrupted_correct"]
    return bool(enough and (correct or cfg["use_pairs"] == "all"))


def _patch_pair(lm: LoadedModel, pair: AgreementPair, cfg: dict[str, Any]):
    """One pair: its row of the ``pairs`` table and, when used, its per-site patched scores."""
    encoded = encode_pair(lm, pair.clean, pair.corrupted, pair.target, pair.foil)
    run = pair_scores(lm, encoded)
    row = {
        **pair.as_row(),
        "clean_score": run.clean_score,
        "corrupted_score": run.corrupted_score,
        "clean_correct": run.clean_score > 0,
        "corrupted_correct": run.corrupted_score < 0,  # the foil is the corrupted sentence's correct verb
        "direction_correct": run.clean_score > run.corrupted_score,  # the score moves toward the right verb
    }
    row["used"] = _used(row, cfg)
    if not row["used"]:
        return row, None, None
    batch = int(cfg["batch_rows"])
    if cfg.get("direction", "denoising") == "noising":  # the corrupted run's activations into the clean run
        encoded = swapped(encoded)
        run = pair_scores(lm, encoded)
    return row, hidden_state_scores(lm, encoded, run, batch_rows=batch), head_scores(lm, encoded, run, batch_rows=batch)


def _site_rows(pair: AgreementPair, row: dict[str, Any], hidden: np.ndarray, heads: np.ndarray, direction: str):
    """Long tables of one pair: ``[L + 1, T]`` hidden-state and ``[L, H]`` head scores with their
    restored fractions ``(score - base) / (source - base)``: the run patched into is ``base``, the
    run patched from ``source`` (denoising: corrupted and clean; noising: clean and corrupted, so the
    fraction is the share of the difference destroyed)."""
    clean, corrupted = row["clean_score"], row["corrupted_score"]
    source, into = (clean, corrupted) if direction == "denoising" else (corrupted, clean)
    layers, positions = np.indices(hidden.shape)
    base = {
        "pair_id": pair.pair_id,
        "template": pair.template,
        "clean_score": clean,
        "corrupted_score": corrupted,
        "source_score": source,
        "base_score": into,
    }
    states = pd.DataFrame(
        {
            **base,
            "layer": layers.ravel(),
            "position": positions.ravel(),
            "role": np.asarray(pair.roles)[positions.ravel()],
            "score": hidden.ravel(),
        }
    )
    hl, hh = np.indices(heads.shape)
    head_table = pd.DataFrame(
        {**base, "layer": layer_number(hl.ravel()), "head": head_number(hh.ravel()), "score": heads.ravel()}
    )
    for table in (states, head_table):
        table["restored"] = (table["score"] - into) / (source - into)
    return states, head_table


def patch_pairs(
    lm: LoadedModel, pairs: list[AgreementPair], cfg: dict[str, Any], log=print, desc: str = "patching"
) -> dict[str, pd.DataFrame]:
    """Every pair through the model: ``pairs`` (one row per pair), ``pair_positions`` (pair x layer x
    token) and ``pair_heads`` (pair x layer x head) for the pairs used (empty tables when none is).
    A progress bar over the pairs (:func:`bertology.progress.progress_bar`, labelled ``desc``) and a
    ``log`` line every 20 pairs (the run's log)."""
    rows, states, heads = [], [], []
    direction = cfg.get("direction", "denoising")
    started = time.perf_counter()
    for i, pair in enumerate(progress_bar(pairs, desc=desc, unit="pair")):
        row, hidden, head = _patch_pair(lm, pair, cfg)
        rows.append(row)
        if hidden is not None:
            s, h = _site_rows(pair, row, hidden, head, direction)
            states.append(s)
            heads.append(h)
        if (i + 1) % 20 == 0:
            log(f"    {i + 1}/{len(pairs)} pairs, {time.perf_counter() - started:.0f}s")
    if not states:
        log(
            f"  warning: none of {len(pairs)} pairs is usable (use_pairs={cfg['use_pairs']!r}, "
            f"min_difference={cfg['min_difference']}): nothing is patched"
        )
        return {"pairs": pd.DataFrame(rows), "pair_positions": pd.DataFrame(), "pair_heads": pd.DataFrame()}
    return {"pairs": pd.DataFrame(rows), "pair_positions": pd.concat(states), "pair_heads": pd.concat(heads)}


def _summary(part: pd.DataFrame, confidence: float, seed: int) -> dict[str, Any]:
    """Mean restored fraction over pairs (t interval) and the pooled fraction sum(patched - base) /
    sum(source - base) with a bootstrap over pairs (base: the run patched into; source: the run
    patched from; tables without them are denoising: base corrupted, source clean)."""
    t = t_interval(part["restored"], confidence)
    base = part["base_score"] if "base_score" in part else part["corrupted_score"]
    source = part["source_score"] if "source_score" in part else part["clean_score"]
    pooled = ratio_bootstrap(
        part["score"] - base,
        source - base,
        part["pair_id"],
        confidence=confidence,
        seed=seed,
    )
    return {
        "restored": t.estimate,
        "low": t.low,
        "high": t.high,
        "n_pairs": t.n,
        "pooled": pooled.estimate,
        "pooled_low": pooled.low,
        "pooled_high": pooled.high,
    }


def summarise_sites(
    table: pd.DataFrame, keys: list[str], *, confidence: float = 0.95, threshold: float = 0.1, seed: int = 0
) -> pd.DataFrame:
    """One row per ``keys`` group of a per-pair site table (``pair_positions`` by ``layer, role``;
    ``pair_heads`` by ``layer, head``): ``restored`` (mean over pairs) with its t interval ``low,
    high``, ``n_pairs``, ``pooled`` (ratio of sums) with its bootstrap interval, and ``carries``
    (``low > threshold``)."""
    rows = [{**dict(zip(keys, key)), **_summary(part, confidence, seed)} for key, part in table.groupby(keys)]
    out = pd.DataFrame(rows)
    out["carries"] = out["low"] > threshold
    return out


def _position_effects(positions: pd.DataFrame, cfg: dict[str, Any], seed: int) -> pd.DataFrame:
    """Per layer x role, over all templates (``template = "all"``) and per template."""
    kw: dict[str, Any] = {
        "confidence": float(cfg["confidence"]),
        "threshold": float(cfg["carry_threshold"]),
        "seed": seed,
    }
    every = summarise_sites(positions, ["layer", "role"], **kw).assign(template="all")
    per = summarise_sites(positions, ["template", "layer", "role"], **kw)
    out = pd.concat([every, per], ignore_index=True)
    out["role_order"] = out["role"].map({r: i for i, r in enumerate(ROLE_ORDER)})
    columns = ["template", "layer", "role", "role_order"]
    return out[columns + [c for c in out if c not in columns]].sort_values(["template", "layer", "role_order"])


def pair_accuracy(pairs: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """The model's accuracy on the pairs, per template and over all (``template = "all"``): clean,
    corrupted and both sentences right, and ``direction`` (the clean sentence favours the target more
    than the corrupted one: number moves the score the right way, whatever the model's bias toward
    one form), each with a Wilson interval."""
    rows = []
    for template, part in [("all", pairs), *pairs.groupby("template")]:
        row: dict[str, Any] = {"template": template, "n_pairs": len(part), "n_used": int(part["used"].sum())}
        both = part["clean_correct"] & part["corrupted_correct"]
        for name, hits in (
            ("clean", part["clean_correct"]),
            ("corrupted", part["corrupted_correct"]),
            ("both", both),
            ("direction", part["direction_correct"]),
        ):
            interval = wilson_interval(int(hits.sum()), len(part), confidence)
            row |= {f"{name}_accuracy": interval.estimate, f"{name}_low": interval.low, f"{name}_high": interval.high}
        row["above_chance"] = bool(row["clean_low"] > CHANCE)
        rows.append(row)
    return pd.DataFrame(rows)


def able(accuracy: pd.DataFrame) -> tuple[bool, str]:
    """Whether the model can do the task on these pairs (the ``all`` row of :func:`pair_accuracy`: the
    low end of its clean accuracy's interval above :data:`CHANCE`), and a line that says so with the
    numbers (the warning, when it cannot)."""
    row = accuracy.set_index("template").loc["all"]
    numbers = (
        f"clean accuracy {row['clean_accuracy']:.3f} [{row['clean_low']:.2f}, {row['clean_high']:.2f}] "
        f"over {int(row['n_pairs'])} pairs; chance {CHANCE}"
    )
    if row["clean_low"] > CHANCE:
        return True, f"the model does the task above chance: {numbers}; {int(row['n_used'])} pairs enter the means"
    return False, (
        f"warning: the model is not shown to do the task ({numbers}, the interval reaches chance): "
        "no site is named as carrying number; the maps below describe a model that cannot tell the verbs apart"
    )


def _carriers(positions: pd.DataFrame, heads: pd.DataFrame) -> pd.DataFrame:
    """The sites whose interval lies above the threshold, largest first: hidden states (layer, role;
    over all templates) and heads."""
    states = positions[(positions["template"] == "all") & positions["carries"]].assign(kind="hidden state")
    head_rows = heads[heads["carries"]].assign(kind="head", role=None)
    columns = ["kind", "layer", "role", "head", "restored", "low", "high", "n_pairs", "pooled"]
    out = pd.concat([states.assign(head=pd.NA), head_rows], ignore_index=True).reindex(columns=columns)
    out["head"] = out["head"].astype("Int64")  # NA for hidden states
    return out.sort_values("restored", ascending=False, ignore_index=True)


def _load(cfg: dict[str, Any]) -> LoadedModel:
    """The model with its MLM head (SDPA attention: no maps are needed) on the config's device."""
    try:
        return load_model(
            cfg["model"], attentions=False, mlm_head=True, device=resolve_device(cfg.get("device") or "cpu")
        )
    except ModelError as exc:
        raise ModelError(f"patching scores the masked verb with the model's MLM head: {exc}") from None


CONTROL_SELECTION = "all"  # the pairs the control's maps are drawn over (see _control)


def _control(lm: LoadedModel, pairs: list[AgreementPair], cfg: dict[str, Any], seed: int, log=print):
    """A randomly initialised copy of the model (same architecture and tokenizer, weights drawn with
    ``seed``) through the same pairs and the same patching: what the task and the maps look like for
    a model that has learnt nothing. Its pairs are selected with ``use_pairs: all`` (the score moves
    toward the right verb by at least ``min_difference``; :data:`CONTROL_SELECTION`): a random model
    gets almost no pair right in both sentences, and the lenient selection is the one under which
    patching a model that knows nothing can still draw sites that look like carriers. Returns the
    :func:`patch_pairs` tables; costs at most one more patching run over the pairs."""
    control = random_init_like(lm, seed)
    return patch_pairs(
        control, pairs, {**cfg, "use_pairs": CONTROL_SELECTION}, log, desc="patching: random-init control"
    )


def patching_analysis(ctx: StudyContext) -> None:
    """Activation patching over subject-verb agreement minimal pairs (Vig et al. 2020; Meng et al.
    2022; Finlayson et al. 2021): which hidden states and heads carry the subject's number.

    Config (:data:`PATCHING_DEFAULTS`): ``model`` (with an MLM head), ``pairs`` (how many minimal
    pairs to draw), ``templates``, ``verbs``, ``flip``, ``use_pairs`` (``correct``, the default:
    only pairs whose clean and corrupted sentences the model gets right; ``all``), ``min_difference``
    (nats), ``direction`` (``denoising``: clean into corrupted; ``noising``: corrupted into clean),
    ``random_init_control``, ``carry_threshold``, ``confidence``, ``batch_rows``, ``device``,
    ``seed`` (the pairs drawn; the bootstrap; the control's weights).

    Tables: ``pairs`` (every pair, its scores, correctness, whether used), ``accuracy``
    (:func:`pair_accuracy`; ``above_chance``), with ``random_init_control`` the same for a random-init
    copy (``control_pairs``, ``control_accuracy``, ``control_pair_positions`` / ``control_pair_heads``
    and, when a control pair is used, ``control_position_effects`` / ``control_head_effects``;
    :func:`_control`), ``pair_positions`` / ``pair_heads`` (per pair and site: patched
    ``score``, ``restored``), ``position_effects`` (per template or ``all`` x layer x role) and
    ``head_effects`` (per layer x head) from :func:`summarise_sites` (none when no pair is used), and
    ``number_carriers`` (the sites whose interval lies above ``carry_threshold``), written only when
    the model does the task above chance (:func:`able`)."""
    cfg = ctx.config
    _check(cfg)
    lm = _load(cfg)
    pairs = agreement_pairs(
        lm.tokenizer, int(cfg["pairs"]), seed=ctx.seed, templates=cfg["templates"], verbs=cfg["verbs"], flip=cfg["flip"]
    )
    ctx.record(
        model=lm.record(),
        pairs_drawn=len(pairs),
    )
    raw = ctx.steps(["pairs", "pair_positions", "pair_heads"], lambda: patch_pairs(lm, pairs, cfg, ctx.log))
    kw: dict[str, Any] = {
        "confidence": float(cfg["confidence"]),
        "threshold": float(cfg["carry_threshold"]),
        "seed": ctx.seed,
    }
    accuracy = ctx.step("accuracy", lambda: pair_accuracy(raw["pairs"], float(cfg["confidence"])))
    if cfg.get("random_init_control", True):
        names = ["control_pairs", "control_pair_positions", "control_pair_heads"]
        control = ctx.steps(
            names, lambda: {f"control_{k}": v for k, v in _control(lm, pairs, cfg, ctx.seed, ctx.log).items()}
        )
        ctx.step("control_accuracy", lambda: pair_accuracy(control["control_pairs"], float(cfg["confidence"])))
        ctx.record(control_selection=CONTROL_SELECTION)
        if not control["control_pair_positions"].empty:
            states, head_rows = control["control_pair_positions"], control["control_pair_heads"]
            ctx.step("control_position_effects", lambda: _position_effects(states, cfg, ctx.seed))
            ctx.step("control_head_effects", lambda: summarise_sites(head_rows, ["layer", "head"], **kw))
    ok, verdict = able(accuracy)
    ctx.record(above_chance=ok, task_check=verdict, direction=cfg.get("direction", "denoising"))
    ctx.log(f"  {verdict}")
    if raw["pair_positions"].empty:
        return
    positions = ctx.step("position_effects", lambda: _position_effects(raw["pair_positions"], cfg, ctx.seed))
    heads = ctx.step("head_effects", lambda: summarise_sites(raw["pair_heads"], ["layer", "head"], **kw))
    if ok:
        ctx.step("number_carriers", lambda: _carriers(positions, heads))
