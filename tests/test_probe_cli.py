"""`bertology probe` end to end on a tiny random BERT saved to disk (it runs the edge_probing study:
same manifest schema, same tables), and probe_layers on a store."""

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from bertology.cli import app
from bertology.probes.probing.edge import probe_layers
from bertology.results import read_manifest, read_table
from bertology.testing import make_tiny_bert

runner = CliRunner()


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def tiny_dir(tmp_path, minilm_tokenizer):
    path = tmp_path / "tiny-bert"
    make_tiny_bert(minilm_tokenizer).save_pretrained(path)  # safetensors
    minilm_tokenizer.save_pretrained(path)
    return path


def _only_run(root):
    runs = sorted((root / "edge_probing").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def test_probe_command_writes_results(tiny_dir, tmp_path):
    out = tmp_path / "results"
    result = runner.invoke(
        app,
        [
            "probe",
            "--model",
            str(tiny_dir),
            "--task",
            "pos",
            "--limit",
            "40",
            "--seeds",
            "0",
            "--mode",
            "all",
            "--control",
            "--mdl",
            "--probe",
            "linear",
            "--max-epochs",
            "3",
            "--full",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    run = _only_run(out)
    assert f"wrote {run}" in result.output
    scores = read_table(run, "layer_scores")
    assert set(scores["mode"]) == {"per_layer", "mix", "cumulative"}
    per_layer = scores[(scores["mode"] == "per_layer") & (scores["split"] == "test")]
    assert set(per_layer["layer"]) == {0, 1, 2}
    assert "selectivity" in set(scores["metric"])
    summary = read_table(run, "summary")
    assert summary["task"].tolist() == ["pos"] and 0 <= summary["expected_layer_mix"].iloc[0] <= 2
    manifest = read_manifest(run)
    # the study config's random_baseline_tasks include pos: the baseline runs too
    assert manifest["tables"] == [
        "controls",
        "layer_differences",
        "layer_intervals",
        "layer_scores",
        "mdl",
        "mix_weights",
        "random_baseline",
        "summary",
        "test_sentences",
    ]
    differences = read_table(run, "layer_differences")  # the other two layers against the dev-chosen best
    assert len(differences) == 2 and (differences["reference_layer"] == summary["best_layer"].iloc[0]).all()
    # one seed: no interval; the test set's size and its small-sample flag are in the tables
    row = summary.iloc[0]
    assert row["selected_on"] == "dev" and row["n_seeds"] == 1 and pd.isna(row["best_layer_low"])
    assert bool(row["small_sample"]) == (row["n_test"] < 100)
    assert (read_table(run, "controls")["small_sample"] == row["small_sample"]).all()
    assert manifest["tasks"]["pos"]["source"].startswith("gold") and manifest["model"]["fingerprint"]
    assert manifest["config"]["tasks"] == ["pos"] and manifest["config"]["mdl_tasks"] == ["pos"]
    # a second call finds the complete run; --force recomputes it
    again = runner.invoke(
        app,
        [
            "probe",
            "--model",
            str(tiny_dir),
            "--task",
            "pos",
            "--limit",
            "40",
            "--seeds",
            "0",
            "--mode",
            "all",
            "--control",
            "--mdl",
            "--probe",
            "linear",
            "--max-epochs",
            "3",
            "--full",
            "--out",
            str(out),
        ],
    )
    assert again.exit_code == 0 and "complete run found" in again.output


def test_probe_command_is_quick_unless_full(tiny_dir, tmp_path):
    """Without --full: per_layer, one seed, no control task, no MDL, no random-init baseline; said on
    the terminal and in --help, and an option given still wins."""
    out = tmp_path / "results"
    result = runner.invoke(
        app,
        [
            "probe",
            "--model",
            str(tiny_dir),
            "--task",
            "pos",
            "--limit",
            "40",
            "--probe",
            "linear",
            "--max-epochs",
            "2",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "quick run (per_layer, 1 seed, no control task, no MDL, no random-init baseline" in result.output
    assert "add --full" in result.output and "pos / per_layer: 1 seed(s) x every layer" in result.output
    manifest = read_manifest(_only_run(out))
    config = manifest["config"]
    assert config["modes"] == ["per_layer"] and config["seeds"] == [0] and config["control"] is False
    assert config["mdl_tasks"] == [] and config["random_baseline_tasks"] == []
    assert not {"controls", "mdl", "random_baseline"} & set(manifest["tables"])
    given = runner.invoke(
        app,
        [
            "probe",
            "--model",
            str(tiny_dir),
            "--task",
            "pos",
            "--limit",
            "40",
            "--probe",
            "linear",
            "--max-epochs",
            "2",
            "--seeds",
            "0,1",
            "--control",
            "--out",
            str(tmp_path / "g"),
        ],
    )
    assert given.exit_code == 0, given.output
    config = read_manifest(_only_run(tmp_path / "g"))["config"]
    assert config["seeds"] == [0, 1] and config["control"] is True and config["modes"] == ["per_layer"]
    import re

    help_text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", runner.invoke(app, ["probe", "--help"]).output).split())
    assert "--full" in help_text and "quick default: per_layer" in help_text


def test_cli_probe_run_is_a_study_run(tiny_dir, tmp_path):
    """A CLI run and run_study with the same overrides: one manifest schema, the same run id and tables."""
    from bertology.studies import run_study

    out = tmp_path / "cli"
    result = runner.invoke(
        app,
        [
            "probe",
            "--model",
            str(tiny_dir),
            "--task",
            "entities",
            "--limit",
            "40",
            "--mode",
            "per_layer",
            "--seeds",
            "0,1",
            "--probe",
            "linear",
            "--max-epochs",
            "2",
            "--mdl",
            "--no-random-baseline",
            "--full",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    cli_run = _only_run(out)
    overrides = {
        "model": str(tiny_dir),
        "tasks": ["entities"],
        "limit": 40,
        "modes": ["per_layer"],
        "seeds": [0, 1],
        "probe": "linear",
        "max_epochs": 2,
        "mdl_tasks": ["entities"],
        "random_baseline_tasks": [],
    }
    study_run = run_study("edge_probing", overrides=overrides, results_root=tmp_path / "study", log=lambda m: None)
    a, b = read_manifest(cli_run), read_manifest(study_run)
    assert set(a) == set(b) >= {"study", "run_id", "config", "seed", "tables", "model", "corpus", "tasks"}
    for key in ("study", "run_id", "config", "seed", "tables", "model", "corpus", "tasks", "description"):
        assert a[key] == b[key], key
    assert a["study"] == "edge_probing" and a["config"]["control"] is True  # not given: the study config's
    assert a["tables"] == [
        "controls",
        "layer_differences",
        "layer_intervals",
        "layer_scores",
        "mdl",
        "mix_weights",
        "summary",
        "test_sentences",
    ]
    # 40 sentences hold a handful of entity mentions: flagged in the summary and on the terminal
    summary = read_table(cli_run, "summary").iloc[0]
    assert summary["small_sample"] and summary["n_test"] < 100 and summary["n_seeds"] == 2
    assert f"warning: entities: only {summary['n_test']} test examples (< 100)" in result.output
    for name in a["tables"]:
        x, y = read_table(cli_run, name), read_table(study_run, name)
        if "metric" in x:  # fitting times differ from run to run
            x, y = (t[t["metric"] != "seconds"].reset_index(drop=True) for t in (x, y))
        pd.testing.assert_frame_equal(x, y, obj=name)


def test_probe_command_reads_jsonl_task_and_reports_bad_line(tiny_dir, tmp_path):
    task = tmp_path / "toy.jsonl"
    lines = [
        json.dumps(
            {
                "text": f"the cat number {i} sat on mat {i}",
                "targets": [{"span1": [1, 2], "span2": [4, 5], "label": "subj"}, {"span1": [5, 7], "label": "loc"}][:1],
            }
        )
        for i in range(40)
    ]
    lines += [
        json.dumps({"text": f"a dog {i} ran", "targets": [{"span1": [1, 2], "span2": [3, 4], "label": "agent"}]})
        for i in range(40)
    ]
    task.write_text("\n".join(lines) + "\n")
    out = tmp_path / "results"
    result = runner.invoke(
        app,
        [
            "probe",
            "--model",
            str(tiny_dir),
            "--task",
            str(task),
            "--seeds",
            "0",
            "--mode",
            "per_layer",
            "--max-epochs",
            "3",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    run = _only_run(out)
    scores = read_table(run, "layer_scores")
    assert set(scores["task"]) == {"toy"}
    manifest = read_manifest(run)
    # the file's own sentences are the corpus; no MDL / random baseline (not in the study's task lists)
    assert manifest["corpus"]["name"] == "toy" and manifest["corpus"]["sentences"] == 80
    assert manifest["tasks"][str(task)] == {"name": "toy", "source": "gold: user file", "examples": 80, "labels": 2}
    assert "mdl" not in manifest["tables"] and "random_baseline" not in manifest["tables"]
    task.write_text(lines[0] + "\n{oops\n")
    from cli_inprocess import run_cli  # ``bertology.cli.main`` in this process: no fresh interpreter's imports

    proc = run_cli("probe", "--model", str(tiny_dir), "--task", str(task), "--out", str(tmp_path / "bad"))
    assert proc.returncode == 2 and "toy.jsonl:2" in proc.stderr and "Traceback" not in proc.stderr


def test_probe_layers_on_store_and_on_model(tiny_lm, small_corpus):
    from bertology.store import extract

    store = extract(tiny_lm, small_corpus, attentions=False, progress=False)
    df = probe_layers(store, small_corpus, "pos", seeds=(0,), probe="linear", layers=[0, 2], max_epochs=5)
    assert set(df["layer"]) >= {0, 2} and 1 not in set(df["layer"])
    df2 = probe_layers(tiny_lm, small_corpus, "pos", seeds=(0,), probe="linear", layers=[0, 2], max_epochs=5)
    pd.testing.assert_frame_equal(df.drop(columns="value"), df2.drop(columns="value"))


def test_random_init_baseline_and_mdl_layers(tiny_lm, small_corpus):
    from bertology.probes.probing.baselines import random_init_baseline
    from bertology.probes.probing.mdl import mdl_layers

    df = random_init_baseline(tiny_lm, small_corpus, "pos", seed=1, seeds=(0,), probe="linear", max_epochs=3)
    assert set(df["model"]) == {"random-init"} and (df.loc[df.metric == "accuracy", "value"] > 0).all()
    from bertology.paths import stores_dir
    from bertology.store import FeatureStore

    made = [FeatureStore(p) for p in stores_dir().iterdir() if (p / "manifest.json").is_file()]
    random_stores = [s for s in made if s.manifest["model"]["name"] != tiny_lm.name]
    # the baseline's store holds hidden states only: its probes never read attention maps
    assert random_stores and not any(s.has_attention for s in random_stores)
    mdl = mdl_layers(tiny_lm, small_corpus, "pos", probe="linear", control=True, max_epochs=3)
    assert set(mdl["control"]) == {False, True}
    comp = mdl[mdl.metric == "compression"]
    assert (comp["value"] > 0).all() and set(comp["layer"]) == {0, 1, 2}


def test_each_probing_analysis_is_one_function_for_study_and_cli():
    from bertology.probes.probing import analysis
    from bertology.studies import load_study

    for study, defaults, run in (
        ("edge_probing", analysis.EDGE_PROBING_DEFAULTS, analysis.edge_probing_analysis),
        ("feature_combinations", analysis.FEATURE_COMBINATIONS_DEFAULTS, analysis.feature_combinations_analysis),
    ):
        module = load_study(study)
        assert module.DEFAULTS is defaults and module.run is run
    help_text = runner.invoke(app, ["probe", "--help"]).output
    assert "--force" in help_text and "--random-baseline" in help_text


def test_quickstart_probe_batch_size_reaches_the_probes():
    """The quickstart's and the tour's probing configs set batch_size 128 and 4 epochs; the field is validated
    like every other and goes into ProbeConfig (the default stays 512)."""
    from bertology.probes.probing import analysis
    from bertology.probes.probing.edge import ProbeConfig
    from bertology.runs import read_config_file, validate_config
    from bertology.studies import default_config_file

    assert ProbeConfig().batch_size == 512 and analysis.EDGE_PROBING_DEFAULTS["batch_size"] == 512
    for name, defaults, variant in (
        ("edge_probing", analysis.EDGE_PROBING_DEFAULTS, "quickstart"),
        ("edge_probing", analysis.EDGE_PROBING_DEFAULTS, "tour"),
        ("feature_combinations", analysis.FEATURE_COMBINATIONS_DEFAULTS, "tour"),
    ):
        path = default_config_file(name, variant)
        cfg = validate_config(defaults, read_config_file(path), str(path))
        assert cfg["batch_size"] == 128 and cfg["max_epochs"] == 4
    settings = analysis.probe_settings(cfg)
    assert ProbeConfig(**settings).batch_size == 128
    with pytest.raises(Exception, match="batch_size"):
        validate_config(analysis.EDGE_PROBING_DEFAULTS, {"batch_size": "big"}, "x.yaml")


@pytest.mark.parametrize(
    "options, message",
    [
        ({"seeds": "0,x"}, "--seeds must be comma-separated integers"),
        ({"seeds": ","}, "--seeds: give at least one seed"),
        ({"seeds": "0,-1"}, "--seeds must be integers >= 0"),
        ({"mode": "sideways"}, "--mode must be one of"),
        ({"split": "random"}, "--split must be fixed or per_seed"),
    ],
)
def test_bad_probe_options_are_config_errors(options, message):
    from bertology.cli.probe import probe_overrides
    from bertology.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        probe_overrides(**options)


def test_the_split_follows_the_run_seed():
    """split fixed: the run's seed draws the one split; per_seed: none (each probe seed its own);
    anything else is a config error."""
    from bertology.errors import ConfigError
    from bertology.probes.probing.analysis import split_seed

    assert split_seed({"split": "fixed"}, 7) == 7 and split_seed({}, 3) == 3
    assert split_seed({"split": "per_seed"}, 7) is None
    with pytest.raises(ConfigError, match="split must be one of"):
        split_seed({"split": "sometimes"}, 0)


def test_small_sample_warning_with_one_seed_asks_for_seeds_not_for_missing_intervals():
    from bertology.cli.probe import small_sample_warnings

    summary = pd.DataFrame(
        {
            "task": ["entities", "deps"],
            "n_test": [43, 60],
            "small_sample": [True, True],
            "best_layer_low": [float("nan"), 0.7],
            "best_layer_high": [float("nan"), 0.9],
        }
    )
    one_seed, seeds = small_sample_warnings(summary)
    assert one_seed.startswith("warning: entities: only 43 test examples") and one_seed.endswith(
        "one seed: no interval; use --seeds 3"
    )
    assert "best_layer_low/high" not in one_seed and seeds.endswith(
        "read the intervals (best_layer_low/high), not the ranking"
    )


@pytest.mark.parametrize(
    "study, change, field",
    [
        ("edge_probing", {"tasks": ["pos", "dep"]}, "tasks"),
        ("edge_probing", {"mdl_tasks": ["dep"]}, "mdl_tasks"),  # else: silently no MDL for it
        ("edge_probing", {"random_baseline_tasks": ["ner"]}, "random_baseline_tasks"),
        ("feature_combinations", {"tasks": ["entity"]}, "tasks"),
        ("feature_combinations", {"tasks": ["probe.jsonl"]}, "tasks"),  # probed on the study's corpus store
        ("emergence", {"tasks": ["upos"]}, "tasks"),  # else found after pretraining / every checkpoint's store
        ("pretraining_variants", {"tasks": ["pos", "dep"]}, "tasks"),
    ],
)
def test_a_misspelt_probing_task_is_refused_before_any_work(tmp_path, study, change, field):
    from bertology.errors import ConfigError
    from bertology.studies import run_study

    with pytest.raises(ConfigError, match=rf"{study}: .*field '{field}' must be a list of tasks \(pos, xpos"):
        run_study(study, overrides=change, results_root=tmp_path, log=lambda m: None)
    assert not any(tmp_path.rglob("*.parquet"))


@pytest.mark.parametrize("study", ["edge_probing", "feature_combinations"])
def test_a_task_too_small_to_split_fails_before_any_task_is_probed(tiny_dir, tmp_path, study):
    """Three Brown sentences hold entities in only two: that task cannot be split into train, dev and
    test, and the run says so before probing 'pos' (listed first) -- not after."""
    from bertology.probes.probing.tasks import TaskError
    from bertology.studies import run_study

    said: list[str] = []
    overrides = {"model": str(tiny_dir), "limit": 3, "tasks": ["pos", "entities"]}
    with pytest.raises(TaskError, match="task 'entities': needs at least 3 sentences with targets to split, has 2"):
        run_study(study, overrides=overrides, results_root=tmp_path, log=said.append)
    assert not any(line.strip().startswith("pos /") for line in said), said  # edge probing's per-task lines


def test_a_task_too_small_to_split_fails_before_any_checkpoint_is_analysed(tmp_path):
    """emergence (over the shipped bert-mini-english checkpoints): before the first checkpoint's store
    and probes. (pretraining_variants checks the same before pretraining any variant, after training
    the tokenizer it needs to choose the analysis sentences: checked by hand, too slow for a test.)"""
    from bertology.probes.probing.tasks import TaskError
    from bertology.studies import run_study

    said: list[str] = []
    with pytest.raises(TaskError, match="task 'entities': needs at least 3 sentences with targets to split, has 2"):
        run_study(
            "emergence", overrides={"limit": 3, "tasks": ["pos", "entities"]}, results_root=tmp_path, log=said.append
        )
    assert not any("checkpoint" in line for line in said), said
