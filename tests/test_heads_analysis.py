"""One entry point per heads analysis: ``bertology heads`` / ``bertology prune`` are study runs of
``head_types`` / ``pruning`` (same analysis function, same manifest schema, same tables)."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from cli_inprocess import run_cli
from typer.testing import CliRunner

from bertology.cli import app
from bertology.errors import ConfigError
from bertology.probes.heads import HEAD_TYPES_DEFAULTS, PRUNING_DEFAULTS, head_types_analysis, pruning_analysis
from bertology.results import read_extra, read_manifest, read_table
from bertology.runs import StudyContext
from bertology.studies import load_study, run_study

runner = CliRunner()


def quiet(_message: str) -> None:
    pass


def test_studies_are_the_library_analyses():
    assert load_study("head_types").run is head_types_analysis
    assert load_study("head_types").DEFAULTS is HEAD_TYPES_DEFAULTS
    assert load_study("pruning").run is pruning_analysis
    assert load_study("pruning").DEFAULTS is PRUNING_DEFAULTS
    for f in (head_types_analysis, pruning_analysis):
        assert "et al." in f.__doc__ and "Tables" in f.__doc__ and "Config" in f.__doc__


def test_heads_cli_run_is_a_head_types_study_run(tmp_path, one_torch_thread):
    result = runner.invoke(app, ["heads", "--limit", "20", "--word-vectors", "none", "--out", str(tmp_path / "cli")])
    assert result.exit_code == 0, result.output
    cli_runs = list((tmp_path / "cli" / "head_types").iterdir())
    assert len(cli_runs) == 1 and f"wrote {cli_runs[0]}" in result.output
    cli_dir = cli_runs[0]

    study_dir = run_study(
        "head_types", overrides={"limit": 20, "word_vectors": "none"}, results_root=tmp_path / "study", log=quiet
    )
    assert cli_dir.name == study_dir.name  # same config + seed: same run id
    cli_manifest, study_manifest = read_manifest(cli_dir), read_manifest(study_dir)
    assert set(cli_manifest) == set(study_manifest)
    assert {"study", "run_id", "config", "seed", "tables", "extras", "model", "corpus", "store"} <= set(cli_manifest)
    assert cli_manifest["study"] == "head_types" and cli_manifest["run_id"] == cli_dir.name
    assert cli_manifest["config"] == study_manifest["config"]
    assert cli_manifest["config"]["limit"] == 20 and cli_manifest["config"]["word_vectors"] == "none"
    assert cli_manifest["seed"] == study_manifest["seed"] == 0
    assert cli_manifest["corpus"] == study_manifest["corpus"] and cli_manifest["corpus"]["sentences"] == 20
    assert cli_manifest["model"] == study_manifest["model"]
    assert cli_manifest["tables"] == study_manifest["tables"]
    assert {"head_stats", "head_dependency", "head_types", "head_type_matrix", "head_best", "attention_probe"} == set(
        cli_manifest["tables"]
    )
    for name in cli_manifest["tables"]:
        pd.testing.assert_frame_equal(read_table(cli_dir, name), read_table(study_dir, name))
    assert read_extra(cli_dir, "attention_examples") == read_extra(study_dir, "attention_examples")
    assert "uas" in result.output  # the summary is read back from the run's tables

    again = runner.invoke(app, ["heads", "--limit", "20", "--word-vectors", "none", "--out", str(tmp_path / "cli")])
    assert again.exit_code == 0 and "complete run found" in again.output


def test_prune_cli_maps_options_onto_the_pruning_config(tmp_path, one_torch_thread):
    from bertology.testing import save_tiny_model_dir

    # a tiny random 2-layer, 4-head BERT, not the default MiniLM: what is checked is how the options
    # map onto the config and which tables the run writes, not the model's numbers
    tiny = save_tiny_model_dir("bert", tmp_path / "tiny")
    result = runner.invoke(
        app,
        [
            "prune",
            "--model",
            str(tiny),
            "--limit",
            "20",
            "--method",
            "random,l0",
            "--step",
            "0.5",
            "--lam",
            "0.1",
            "--lam",
            "0.5",
            "--l0-steps",
            "3",
            "--seed",
            "1",
            "--full",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "out" / "pruning").iterdir()
    manifest = read_manifest(run_dir)
    cfg = manifest["config"]
    assert manifest["study"] == "pruning" and manifest["seed"] == 1 and run_dir.name.endswith("seed1")
    assert cfg["methods"] == ["random", "l0"] and cfg["step"] == 0.5 and cfg["limit"] == 20
    assert cfg["l0_lambdas"] == [0.1, 0.5] and cfg["l0_steps"] == 3
    assert cfg["max_share"] == PRUNING_DEFAULTS["max_share"]  # not given: from the study config
    assert manifest["tables"] == [
        "importance",
        "l0_evaluation",
        "l0_gates",
        "pruning_cost",
        "pruning_curves",
        "pruning_threshold_summary",
        "pruning_thresholds",
    ]
    summary = read_table(run_dir, "pruning_threshold_summary")
    thresholds = read_table(run_dir, "pruning_thresholds")
    for row in summary.itertuples():  # the mean over the three random orders, with a t-interval around it
        shares = thresholds[thresholds["tolerance"] == row.tolerance]["removable_share"]
        assert row.n_orders == 3 and row.removable_share == pytest.approx(shares.mean())
        assert row.low <= row.removable_share <= row.high and row.interval.startswith("t over 3 orders")
    curves = read_table(run_dir, "pruning_curves")
    assert set(curves["method"]) == {"random"} and set(curves["seed"]) == {1, 2, 3}
    assert read_table(run_dir, "pruning_cost").empty  # real removal follows the importance curve
    gates = read_table(run_dir, "l0_gates")
    assert sorted(set(gates["lam"])) == [0.1, 0.5] and set(gates["seed"]) == {1}
    l0 = read_table(run_dir, "l0_evaluation").set_index("lam")
    for lam, part in gates.groupby("lam"):  # each λ's kept heads, evaluated on dev and test
        assert l0.loc[lam, "heads_kept"] == part["kept"].sum() and l0.loc[lam, "n_heads"] == len(part)
    assert (l0["selected_on"] == "none").all() and (l0["value_low"] <= l0["value"]).all()
    assert (l0["value"] <= l0["value_high"]).all() and l0["value_dev"].notna().all()
    assert "L0 λ=0.1: kept" in result.output and f"wrote {run_dir}" in result.output


def test_prune_cli_refuses_an_unknown_method():
    proc = run_cli("prune", "--method", "importance,magnitude")  # ``bertology.cli.main`` in this process
    assert proc.returncode == 2
    assert "error: --method 'importance,magnitude'" in proc.stderr and "l0" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "change, message",
    [
        ({"methods": ["importance", "magnitude"]}, "unknown method"),
        ({"methods": ["l0"], "l0_lambdas": []}, "l0_lambdas"),
        ({"metric": "perplexity"}, "metric must be auto, mlm or pos"),
    ],
)
def test_pruning_config_is_checked_before_any_work(tmp_path, change, message):
    ctx = StudyContext("pruning", {**PRUNING_DEFAULTS, "model": "no-such-model", **change}, 0, tmp_path, log=quiet)
    with pytest.raises(ConfigError, match=message):
        pruning_analysis(ctx)


def test_head_types_on_a_corpus_without_dependencies(tmp_path, one_torch_thread):
    bio = tmp_path / "ner.bio"
    bio.write_text(
        "".join(f"The O\nold O\nman O\nsaw O\nthe O\nboat O\nin O\nBoston B-LOC\nagain{i} O\n\n" for i in range(6))
    )
    run_dir = run_study(
        "head_types",
        overrides={"corpus": str(bio), "word_vectors": "none", "min_count": 2},
        results_root=tmp_path / "res",
        log=quiet,
    )
    manifest = read_manifest(run_dir)
    assert manifest["tables"] == ["head_dependency", "head_stats", "head_type_matrix", "head_types"]
    assert read_table(run_dir, "head_dependency").empty
    types = read_table(run_dir, "head_types")
    assert len(types) == 6 * 12 and "syntactic" not in set(types["type"])


def test_head_types_defaults_are_the_papers_definitions():
    assert HEAD_TYPES_DEFAULTS["positional_level"] == "token"  # Voita: sub-word tokens
    assert HEAD_TYPES_DEFAULTS["special_tokens"] == "keep"  # Clark: [CLS]/[SEP] kept
    assert HEAD_TYPES_DEFAULTS["exclude_self"] is True  # Clark: most-attended-to other word
    assert HEAD_TYPES_DEFAULTS["syntactic_relations"] == ["nsubj", "dobj", "amod", "advmod"]  # Voita


@pytest.mark.parametrize(
    "change, message",
    [
        ({"positional_level": "char"}, "positional_level"),
        ({"special_tokens": "ignore"}, "special_tokens"),
        ({"positional_queries": "cls"}, "positional_queries"),
        ({"syntactic_relations": []}, "syntactic_relations"),
    ],
)
def test_head_types_options_are_checked_before_any_work(tmp_path, change, message):
    ctx = StudyContext(
        "head_types", {**HEAD_TYPES_DEFAULTS, "model": "no-such-model", **change}, 0, tmp_path, log=quiet
    )
    with pytest.raises(ConfigError, match=message):
        head_types_analysis(ctx)


def test_removable_shares_hand_computed():
    from bertology.probes.heads.pruning import removable_shares

    # minus the MLM loss: 2.00 -> 2.01 (+0.5%) -> 2.03 (+1.5%) -> 2.08 (+4%) -> 2.20 (+10%) -> 2.02
    curve = pd.DataFrame(
        {
            "method": "importance",
            "seed": 0,
            "n_pruned": [0, 1, 2, 3, 4, 5],
            "share_pruned": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5],
            "metric": [-2.00, -2.01, -2.03, -2.08, -2.20, -2.02],
        }
    )
    out = removable_shares(curve, (0.01, 0.05)).set_index("tolerance")
    assert out.loc[0.01, "removable_share"] == 0.1 and out.loc[0.01, "n_removable"] == 1
    assert out.loc[0.05, "removable_share"] == 0.3 and out.loc[0.05, "value"] == -2.08
    # accuracy that never drops more than 1%: every step is removable; the first crossing counts,
    # a later recovery does not
    acc = curve.assign(metric=[0.90, 0.90, 0.895, 0.899, 0.90, 0.90])
    assert removable_shares(acc, (0.01,))["removable_share"].tolist() == [0.5]


def test_pruning_uses_the_mlm_loss_of_a_model_with_an_mlm_head(tmp_path, one_torch_thread):
    from bertology.testing import save_tiny_model_dir

    model_dir = save_tiny_model_dir("bert", tmp_path / "tiny-mlm", mlm=True)
    out = run_study(
        "pruning",
        overrides={
            "model": str(model_dir),
            "limit": 16,
            "methods": ["importance", "random"],
            "step": 0.5,
            "random_seeds": 1,
        },
        results_root=tmp_path / "res",
        log=quiet,
    )
    manifest = read_manifest(out)
    assert manifest["pruning_metric"].startswith("MLM loss")
    curves = read_table(out, "pruning_curves")
    assert (curves["value"] < 0).all()  # minus the held-out MLM loss
    thresholds = read_table(out, "pruning_thresholds")
    assert set(thresholds["tolerance"]) == {0.01, 0.05} and set(thresholds["method"]) == {"importance", "random"}
    pos = run_study(
        "pruning",
        overrides={
            "model": str(model_dir),
            "limit": 16,
            "methods": ["random"],
            "step": 0.5,
            "random_seeds": 1,
            "metric": "pos",
        },
        results_root=tmp_path / "res",
        log=quiet,
    )
    assert read_manifest(pos)["pruning_metric"].startswith("POS tagging head")


def test_a_corpus_too_small_for_best_heads_is_said_before_extraction(tmp_path, monkeypatch, one_torch_thread):
    import bertology.store

    events: list[str] = []
    real_extract = bertology.store.extract

    def extract(*args, **kwargs):
        events.append("extract")
        return real_extract(*args, **kwargs)

    monkeypatch.setattr(bertology.store, "extract", extract)
    run = run_study(
        "head_types", overrides={"limit": 2, "word_vectors": "none"}, results_root=tmp_path, log=events.append
    )
    said = [i for i, e in enumerate(events) if "head_best left out" in e]
    assert said and said[0] < events.index("extract")  # before any extraction
    message = events[said[0]]
    assert re.search(r"at most \d+ arcs of one relation .*needs about 40 \(min_count=20", message)
    assert "--min-count" in message and "--limit" in message
    manifest = read_manifest(run)
    assert "head_best" not in manifest["tables"] and "head_types" in manifest["tables"]
    assert manifest["head_best_skipped"] == message.strip()
    assert "--min-count" in runner.invoke(app, ["heads", "--help"]).output


def test_heads_and_prune_are_quick_unless_full(capsys):
    from bertology.cli.core import quick_overrides as _quick
    from bertology.cli.heads import QUICK_HEADS, QUICK_PRUNE

    assert _quick(QUICK_PRUNE, {"limit": 50}, full=False) == {
        "limit": 50,
        "methods": ["importance", "random"],
        "random_seeds": 1,
    }
    assert "quick run (methods ['importance', 'random'], random_seeds 1, unless given)" in capsys.readouterr().out
    assert _quick(QUICK_PRUNE, {"limit": 50}, full=True) == {"limit": 50}
    assert _quick(QUICK_HEADS, {}, full=False) == {"limit": 200}
    help_text = runner.invoke(app, ["prune", "--help"]).output
    assert "--full" in help_text
