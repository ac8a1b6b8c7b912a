"""Study runner: config validation naming the field, resumable steps, provenance manifest."""

from __future__ import annotations

import pandas as pd
import pytest

from bertology.errors import ConfigError, WorkbenchError
from bertology.results import read_manifest, read_table
from bertology.runs import run_analysis, validate_config
from bertology.studies import run_study

CALLS: list[int] = []
DEFAULTS = {"n": 3, "rate": 0.5, "name": "x", "seed": 0}


def toy_analysis(ctx) -> None:
    """A toy analysis: one table step, one two-table step, one extra; CALLS counts what is computed."""

    def compute():
        CALLS.append(1)
        return pd.DataFrame({"i": range(ctx.config["n"]), "seed": ctx.seed})

    ctx.step("numbers", compute)

    def pair():
        CALLS.append(2)
        return {"a": pd.DataFrame({"x": [1]}), "b": pd.DataFrame({"y": [2, 3]})}

    ctx.steps(["a", "b"], pair)
    ctx.extra("plot", lambda: {"x": [1, 2]})
    ctx.record(model={"name": "none"})


def run_toy(tmp_path, config, **kw):
    return run_analysis(
        "toy",
        "toy study",
        toy_analysis,
        validate_config(DEFAULTS, config, "test"),
        seed=0,
        run_dir=tmp_path / "res" / "toy" / "run1",
        log=lambda m: None,
        **kw,
    )


def test_validate_config_names_the_field():
    defaults = {"n": 3, "rate": 0.5, "layers": [1, 2]}
    assert validate_config(defaults, {"rate": 1}, "f.yaml")["rate"] == 1
    with pytest.raises(ConfigError, match="f.yaml: unknown field 'nn'"):
        validate_config(defaults, {"nn": 1}, "f.yaml")
    with pytest.raises(ConfigError, match="field 'n' must be an integer"):
        validate_config(defaults, {"n": "three"}, "f.yaml")
    with pytest.raises(ConfigError, match="field 'n' must be an integer"):
        validate_config(defaults, {"n": True}, "f.yaml")


def test_run_writes_manifest_and_resumes_without_recomputing(tmp_path):
    CALLS.clear()
    run_dir = run_toy(tmp_path, {"n": 5})
    assert CALLS == [1, 2]
    manifest = read_manifest(run_dir)
    assert manifest["config"]["n"] == 5 and manifest["seed"] == 0 and "packages" in manifest
    assert manifest["tables"] == ["a", "b", "numbers"] and manifest["extras"] == ["plot"]
    assert manifest["model"] == {"name": "none"} and manifest["study"] == "toy"
    assert len(read_table(run_dir, "b")) == 2
    first = read_table(run_dir, "numbers")
    assert first["i"].tolist() == [0, 1, 2, 3, 4]
    # a complete run is returned as it is: nothing computed
    assert run_toy(tmp_path, {"n": 5}) == run_dir and CALLS == [1, 2]
    # an interrupted run (no manifest) resumes from the saved steps: still nothing recomputed
    (run_dir / "manifest.json").unlink()
    again = run_toy(tmp_path, {"n": 5})
    assert again == run_dir and (run_dir / "manifest.json").is_file() and CALLS == [1, 2]
    assert read_manifest(again)["tables"] == ["a", "b", "numbers"]  # reused steps are still listed
    # a resumed step is read back from disk, equal to what the first run wrote
    pd.testing.assert_frame_equal(read_table(again, "numbers"), first)
    # one of the two tables of a multi-table step missing: that step runs again, the other is reused
    (run_dir / "manifest.json").unlink()
    (run_dir / "b.parquet").unlink()
    run_toy(tmp_path, {"n": 5})
    assert CALLS == [1, 2, 2]


def test_run_study_reads_the_shipped_config_and_refuses_bad_files(tmp_path):
    from bertology.studies import default_config_file, list_studies, load_study

    assert {"quickstart", "head_types", "edge_probing", "pruning"} <= set(list_studies())
    assert default_config_file("head_types").is_file()
    assert load_study("head_types").DEFAULTS["model"] == "minilm-l6"
    (tmp_path / "bad.yaml").write_text("rate: [1\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        run_study("head_types", config_file=tmp_path / "bad.yaml", results_root=tmp_path / "res")
    (tmp_path / "unknown.yaml").write_text("layers_to_probe: 3\n")
    with pytest.raises(ConfigError, match="unknown.yaml: unknown field 'layers_to_probe'"):
        run_study("head_types", config_file=tmp_path / "unknown.yaml", results_root=tmp_path / "res")
    with pytest.raises(WorkbenchError, match="unknown study 'nope'"):
        run_study("nope", results_root=tmp_path / "res")


# --------------------------------------------------------------------------- run ids follow the inputs

TOY_CALLS: list[str] = []


def _toy_corpus_study(ctx) -> None:
    """Counts the sentences of the corpus the config names (a step) -- TOY_CALLS records each compute."""
    from bertology.corpus import load_corpus

    def compute():
        TOY_CALLS.append(ctx.config["corpus"])
        corpus = load_corpus(ctx.config["corpus"])
        return pd.DataFrame({"sentences": [len(corpus)], "first_word": [corpus[0].words[0]]})

    ctx.step("size", compute)


@pytest.fixture
def toy_study(monkeypatch):
    """A study module ``toy`` registered beside the shipped ones."""
    import sys
    import types

    import bertology.studies as studies

    module = types.ModuleType("bertology.studies.toy")
    module.DESCRIPTION, module.DEFAULTS, module.run = "toy", {"corpus": "", "model": "", "seed": 0}, _toy_corpus_study
    monkeypatch.setitem(sys.modules, "bertology.studies.toy", module)
    names = studies._names()
    monkeypatch.setattr(studies, "_names", lambda: sorted(names + ["toy"]))
    TOY_CALLS.clear()
    return module


def _conllu(path, words_per_sentence):
    lines = []
    for s, words in enumerate(words_per_sentence):
        lines.append(f"# sent_id = s{s}")
        lines += [
            f"{i + 1}\t{w}\t_\tNOUN\t_\t_\t{0 if i == 0 else 1}\t{'root' if i == 0 else 'dep'}\t_\t_"
            for i, w in enumerate(words)
        ]  # a tree: word 1 the root, every other word its dependent
        lines.append("")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_run_id_follows_the_corpus_content_not_its_name(toy_study, tmp_path):
    import hashlib

    corpus = _conllu(tmp_path / "c.conllu", [["a", "cat"], ["the", "dog"]])
    res = tmp_path / "res"
    first = run_study("toy", overrides={"corpus": str(corpus)}, results_root=res, log=lambda m: None)
    assert run_study("toy", overrides={"corpus": str(corpus)}, results_root=res, log=lambda m: None) == first
    assert TOY_CALLS == [str(corpus)]  # identical inputs: resumed, nothing redone
    manifest = read_manifest(first)
    assert manifest["inputs"]["corpus"]["sha256"] == hashlib.sha256(corpus.read_bytes()).hexdigest()
    assert manifest["inputs"]["corpus"]["kind"] == "file" and "code_version" in manifest

    _conllu(corpus, [["one"], ["two"], ["three"]])  # edit the corpus, same file name
    second = run_study("toy", overrides={"corpus": str(corpus)}, results_root=res, log=lambda m: None)
    assert second != first and len(TOY_CALLS) == 2
    assert read_table(second, "size")["sentences"].tolist() == [3]
    assert read_table(first, "size")["sentences"].tolist() == [2]  # the old run is left as it was
    assert read_manifest(second)["inputs"]["corpus"]["sha256"] == hashlib.sha256(corpus.read_bytes()).hexdigest()


def test_an_explicit_run_id_never_mixes_steps_of_old_and_new_inputs(toy_study, tmp_path):
    corpus = _conllu(tmp_path / "c.conllu", [["a", "cat"], ["the", "dog"]])
    res, logs = tmp_path / "res", []
    run = run_study("toy", overrides={"corpus": str(corpus)}, results_root=res, run_id="mine", log=logs.append)
    (run / "manifest.json").unlink()  # an interrupted run of the old corpus
    _conllu(corpus, [["one"], ["two"], ["three"]])
    again = run_study("toy", overrides={"corpus": str(corpus)}, results_root=res, run_id="mine", log=logs.append)
    assert again == run and len(TOY_CALLS) == 2  # the saved step was not reused
    assert read_table(run, "size")["first_word"].tolist() == ["one"]
    assert any("inputs changed" in m and "'corpus'" in m for m in logs)
    # --force recomputes a complete run
    run_study("toy", overrides={"corpus": str(corpus)}, results_root=res, run_id="mine", force=True, log=logs.append)
    assert len(TOY_CALLS) == 3 and read_manifest(run)["inputs"]["corpus"]["kind"] == "file"


def test_run_id_follows_the_model_folder_tokenizer_included(toy_study, tmp_path):
    import transformers

    from bertology.testing import save_tiny_model_dir, tiny_tokenizer

    model_dir = save_tiny_model_dir("bert", tmp_path / "m")
    corpus = _conllu(tmp_path / "c.conllu", [["a", "cat"]])
    res = tmp_path / "res"
    overrides = {"corpus": str(corpus), "model": str(model_dir)}
    first = run_study("toy", overrides=overrides, results_root=res, log=lambda m: None)
    assert read_manifest(first)["inputs"]["model"]["kind"] == "model"
    transformers.BertTokenizer(vocab=dict(tiny_tokenizer("bert").get_vocab()), do_lower_case=False).save_pretrained(
        model_dir
    )  # same weights, a cased tokenizer
    assert run_study("toy", overrides=overrides, results_root=res, log=lambda m: None) != first


def test_force_recomputes_every_step(tmp_path):
    CALLS.clear()
    run_toy(tmp_path, {"n": 2})
    run_toy(tmp_path, {"n": 2}, force=True)
    assert CALLS == [1, 2, 1, 2]


def test_a_run_directory_from_other_inputs_or_without_a_record_is_recomputed(tmp_path):
    CALLS.clear()
    run_dir = run_toy(tmp_path, {"n": 2})
    (run_dir / "inputs.json").unlink()  # made by an older version
    run_toy(tmp_path, {"n": 2})
    assert CALLS == [1, 2, 1, 2]
    run_toy(tmp_path, {"n": 4})  # same directory, another config
    assert CALLS == [1, 2, 1, 2, 1, 2] and read_table(run_dir, "numbers")["i"].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("run_id", ["../../x", "/tmp/x", "a/b", ".hidden", "..", "a\\b", ""])
def test_run_ids_and_study_names_cannot_leave_their_folder(tmp_path, run_id):
    res = tmp_path / "deep" / "res"
    with pytest.raises(ConfigError, match="run id .* is not a plain name"):
        run_study("head_types", run_id=run_id, results_root=res)
    with pytest.raises(ConfigError, match="study name .* is not a plain name"):
        run_study("../head_types", results_root=res)
    assert not (tmp_path / "deep").exists() and not (tmp_path / "x").exists()


def test_cli_refuses_a_run_id_with_one_line(tmp_path, monkeypatch, capsys):
    import sys

    from bertology.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERTOLOGY_RESULTS", str(tmp_path / "results"))
    monkeypatch.setattr(sys, "argv", ["bertology", "study", "run", "head_types", "--run-id", "../../x"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: run id '../../x' is not a plain name") and "Traceback" not in err
    assert not any(tmp_path.rglob("*"))


def test_quickstart_run_ids_are_plain_names_for_model_folders():
    from bertology.paths import plain_name
    from bertology.studies.quickstart import _id_part

    assert _id_part("bert-mini-english@950") == "bert-mini-english@950"
    for folder in ("/tmp/my models/x", "../../x", "models/a"):
        part = _id_part(folder)
        assert plain_name(f"quickstart-{part}-seed0", "run id")
        assert "/" not in part and ".." not in part
    assert _id_part("/a/x") != _id_part("/b/x")


@pytest.mark.parametrize("text", ["null", "[]", '"a string"', "3"])
def test_a_manifest_that_is_not_an_object_is_a_clear_error(tmp_path, text):
    from bertology.results import ResultError, read_manifest

    (tmp_path / "manifest.json").write_text(text)
    with pytest.raises(
        ResultError, match=r"manifest.json: corrupt manifest: holds (null|a list|a string|a number) .*not a JSON object"
    ):
        read_manifest(tmp_path)


def test_declared_inputs_join_the_run_id_without_their_paths(tmp_path):
    from bertology.fingerprints import files_input_digest
    from bertology.runs import analysis_inputs, config_hash, reads_inputs

    table = tmp_path / "a" / "vectors"
    table.parent.mkdir()
    table.write_bytes(b"\x00" * 64)
    moved = tmp_path / "b" / "vectors"
    moved.parent.mkdir()
    moved.write_bytes(b"\x00" * 64)

    def declared(folder, version="1.0"):
        return lambda config: {
            "vectors": files_input_digest("vector package", [folder / "vectors"], name="pkg", version=version)
        }

    @reads_inputs(declared(table.parent))
    def analysis(ctx) -> None:
        pass

    inputs = analysis_inputs(analysis, {})
    assert inputs["vectors"]["kind"] == "vector package" and inputs["vectors"]["version"] == "1.0"
    assert analysis_inputs(toy_analysis, {}) == {}  # nothing declared
    run_id = config_hash({}, 0, inputs)
    assert config_hash({}, 0, declared(moved.parent)({})) == run_id  # same bytes elsewhere: same run
    assert config_hash({}, 0, declared(table.parent, "1.1")({})) != run_id  # another package version
    table.write_bytes(b"\x01" * 64)
    assert config_hash({}, 0, declared(table.parent)({})) != run_id  # other vectors: another run


def test_a_failed_start_leaves_no_run_folder_but_a_failure_after_a_step_keeps_it(tmp_path):
    def fails_at_once(ctx) -> None:
        raise ConfigError("unknown model 'nope'")

    def fails_after_a_step(ctx) -> None:
        ctx.step("numbers", lambda: pd.DataFrame({"i": [1]}))
        raise WorkbenchError("later")

    run_dir = tmp_path / "res" / "toy" / "typo"
    with pytest.raises(ConfigError):
        run_analysis("toy", "toy", fails_at_once, dict(DEFAULTS), seed=0, run_dir=run_dir, log=lambda m: None)
    assert not run_dir.exists() and not run_dir.parent.exists()
    with pytest.raises(WorkbenchError, match="later"):
        run_analysis("toy", "toy", fails_after_a_step, dict(DEFAULTS), seed=0, run_dir=run_dir, log=lambda m: None)
    assert (run_dir / "numbers.parquet").is_file()  # resumable: the saved step stays


def test_study_clean_lists_then_removes_unfinished_runs_never_a_running_one(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from bertology import atomic
    from bertology.cli import app
    from bertology.runs import list_runs

    monkeypatch.setenv("BERTOLOGY_RESULTS", str(tmp_path / "res"))
    complete = run_toy(tmp_path, {})
    stopped = tmp_path / "res" / "toy" / "stopped"
    stopped.mkdir()
    broken = tmp_path / "res" / "toy" / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text("[]")
    running = tmp_path / "res" / "toy" / "running"
    runner = CliRunner()
    with atomic.folder_lock(running):
        statuses = list_runs().set_index("run_id")["status"]
        assert statuses["run1"] == "complete" and statuses["stopped"] == "incomplete"
        assert statuses["running"] == "running" and statuses["broken"].startswith("unreadable")
        listed = runner.invoke(app, ["study", "clean"])
        assert listed.exit_code == 0 and "2 run folder(s) would be removed: add --yes" in listed.output
        assert stopped.is_dir() and broken.is_dir()
        removed = runner.invoke(app, ["study", "clean", "--yes"])
        assert removed.exit_code == 0 and "removed 2 run folder(s)" in removed.output
        assert not stopped.exists() and not broken.exists() and running.is_dir() and complete.is_dir()


def _toy_study(monkeypatch, name: str, run, summary) -> None:
    """Register study ``name`` (its ``run``) for this test, with ``summary`` as its headline figures."""
    import sys
    import types

    import bertology.studies as studies
    from bertology.studies import _summaries

    module = types.ModuleType(f"bertology.studies.{name}")
    module.DESCRIPTION, module.DEFAULTS, module.run = "toy", {"seed": 0}, run
    monkeypatch.setitem(sys.modules, f"bertology.studies.{name}", module)
    names = studies._names()
    monkeypatch.setattr(studies, "_names", lambda: sorted(names + [name]))
    monkeypatch.setitem(_summaries.SUMMARIES, name, summary)


def _one_summary_study(ctx) -> None:
    """A study whose one table is an edge-probing ``summary`` (POS best at layer 2 with an interval,
    entities at layer 3 from one seed: no interval)."""
    ctx.step(
        "summary",
        lambda: pd.DataFrame(
            {
                "task": ["pos", "entities"],
                "best_layer": [2, 3],
                "best_layer_score": [0.921, 0.872],
                "best_layer_low": [0.862, float("nan")],
                "best_layer_high": [0.978, float("nan")],
                "n_test": [479, 43],
                "small_sample": [False, True],
            }
        ),
    )


def test_a_rerun_of_a_finished_study_prints_its_headline_figures(tmp_path, monkeypatch):
    from bertology.studies import _summaries

    _toy_study(monkeypatch, "toysummary", _one_summary_study, _summaries.edge_probing_lines)
    logs: list[list[str]] = [[], []]
    for lines in logs:
        run_study("toysummary", results_root=tmp_path, log=lines.append)
    figures = [
        "toysummary: pos: best layer 2, test 0.921 [0.862, 0.978]",
        "toysummary: entities: best layer 3, test 0.872 (no interval) (small sample: 43 test items)",
    ]
    assert not set(figures) & set(logs[0])  # a fresh run logs its steps
    assert any("complete run found" in line for line in logs[1]) and logs[1][-2:] == figures


def _structural_summary_study(ctx) -> None:
    """A structural probe's ``summary`` (distance probe at layer 3, UUAS with an interval; depth probe
    at layer 2 from one seed) and the LINEAR baseline's UUAS."""
    ctx.step(
        "summary",
        lambda: pd.DataFrame(
            {
                "encoder": ["trained", "trained"],
                "probe": ["distance", "depth"],
                "best_layer": [3, 2],
                "metric": ["uuas", "nspr"],
                "score": [0.612, 0.705],
                "low": [0.58, float("nan")],
                "high": [0.644, float("nan")],
                "n_test": [932, 40],
                "small_sample": [False, True],
            }
        ),
    )
    ctx.step(
        "baselines",
        lambda: pd.DataFrame({"encoder": ["linear"], "probe": ["distance"], "metric": ["uuas"], "score": [0.499]}),
    )


def test_a_rerun_of_the_structural_probe_prints_each_probes_layer_and_scores(tmp_path, monkeypatch):
    from bertology.studies import _summaries

    _toy_study(monkeypatch, "toystructural", _structural_summary_study, _summaries.structural_probe_lines)
    logs: list[list[str]] = [[], []]
    for lines in logs:
        run_study("toystructural", results_root=tmp_path, log=lines.append)
    assert logs[1][-2:] == [
        "toystructural: distance probe, layer 3: UUAS 0.612 [0.580, 0.644] (LINEAR 0.499)",
        "toystructural: depth probe, layer 2: NSpr. 0.705 (no interval) (small sample: 40 test items)",
    ]
