"""Hostile inputs, round four: each now stops with a clear error naming the file, field or value
(or is skipped with a message), and nothing outside the folder a user named is read, written or
removed.

1, 2 ``study clean`` and symbolic links out of results/ · 3 documents linked out of their folder ·
4 a year written as a string · 5 unknown values in the compression and finetuning configs · 6
fine-tuning labels: unseen in train, ``1`` and ``"1"``, floats.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from cli_inprocess import run_cli

from bertology.errors import CorpusError


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``bertology ARGS`` in this process (``cli_inprocess``: the console script's ``main`` with its
    error handling; a fresh ``python -m bertology.cli`` would pay ~3 s of imports a call)."""
    return run_cli(*args, env=env)


def _refused(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit code 2, one ``error:`` line naming ``needles``, no traceback."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "error:" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# --------------------------------------------------------------------------- 1, 2. study clean and symlinks


@pytest.fixture
def results_with_links(tmp_path) -> tuple[Path, Path]:
    """results/ with a stopped run, a study folder linked to a folder elsewhere and a run folder
    linked to a run elsewhere (both of which hold a stopped run of their own)."""
    results = Path(os.environ["BERTOLOGY_RESULTS"])
    (results / "toy" / "stopped").mkdir(parents=True)
    (results / "toy" / "stopped" / "part.parquet").write_text("x")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "study" / "precious").mkdir(parents=True)
    (elsewhere / "study" / "precious" / "data.txt").write_text("keep me")
    (elsewhere / "run").mkdir()
    (elsewhere / "run" / "data.txt").write_text("keep me too")
    (results / "linked_study").symlink_to(elsewhere / "study", target_is_directory=True)
    (results / "toy" / "linked_run").symlink_to(elsewhere / "run", target_is_directory=True)
    return results, elsewhere


def test_1_listing_never_writes_outside_the_results_root(results_with_links):
    results, elsewhere = results_with_links
    before = _tree(elsewhere)
    proc = _cli("study", "clean")
    assert proc.returncode == 0, proc.stderr
    assert "1 run folder(s) would be removed: add --yes" in proc.stdout
    assert "toy/linked_run" in proc.stderr and "linked_study/" in proc.stderr and "skipped" in proc.stderr
    assert _tree(elsewhere) == before  # no .lock files written out there
    listed = _cli("study", "list")
    assert listed.returncode == 0 and "toy/linked_run  (linked:" in listed.stdout
    assert _tree(elsewhere) == before


def test_1_2_clean_yes_removes_nothing_outside_and_goes_on_past_a_linked_run(results_with_links):
    results, elsewhere = results_with_links
    before = _tree(elsewhere)
    proc = _cli("study", "clean", "--yes")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "removed 1 run folder(s)" in proc.stdout  # the rest of the clean went on
    assert "toy/linked_run" in proc.stderr and "not followed" in proc.stderr
    assert not (results / "toy" / "stopped").exists()
    assert _tree(elsewhere) == before  # the linked folders' contents are untouched
    assert (results / "linked_study").is_symlink() and (results / "toy" / "linked_run").is_symlink()


def test_1_remove_unfinished_runs_never_rmtrees_a_link(results_with_links):
    from bertology.runs import list_runs, remove_unfinished_runs

    results, elsewhere = results_with_links
    statuses = list_runs().set_index("path")["status"]
    assert statuses[str(results / "toy" / "linked_run")].startswith("linked")
    assert statuses[str(results / "linked_study")].startswith("linked")
    skipped: list[Path] = []
    assert remove_unfinished_runs(on_skip=lambda p, why: skipped.append(p)) == [results / "toy" / "stopped"]
    assert set(skipped) == {results / "toy" / "linked_run", results / "linked_study"}
    assert (elsewhere / "study" / "precious" / "data.txt").is_file() and (elsewhere / "run" / "data.txt").is_file()


# --------------------------------------------------------------------------- 3, 4. document folders


def _documents(folder: Path, years: dict[str, object]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, year in years.items():
        (folder / f"{name}.txt").write_text(f"The address of {name}. It spoke of things.", "utf-8")
        (folder / f"{name}.json").write_text(json.dumps({"party": "X", "year": year}, indent=1), "utf-8")
    return folder


def _semantic_change_config(tmp_path: Path, documents: Path) -> Path:
    cfg = {
        "documents": str(documents),
        "comparisons": {"early_late": {"a": {"years": [1900, 1929]}, "b": {"years": [1990, 2021]}}},
    }
    path = tmp_path / "semantic_change.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_3_documents_linked_out_of_the_folder_are_refused(tmp_path):
    from bertology.corpus.documents import read_document_folder

    secret = tmp_path / "elsewhere" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("Not a document.", "utf-8")
    folder = _documents(tmp_path / "docs", {"a1901": 1901, "b1995": 1995})
    (folder / "inside.txt").symlink_to(folder / "a1901.txt")  # a link inside the folder is fine
    assert [d.name for d in read_document_folder(folder)] == ["a1901", "b1995", "inside"]
    (folder / "evil.txt").symlink_to(secret)
    with pytest.raises(CorpusError, match=r"evil.txt: a symbolic link to .*secret.txt, outside the folder"):
        read_document_folder(folder)
    (folder / "evil.txt").unlink()
    (folder / "b1995.json").unlink()
    (folder / "b1995.json").symlink_to(secret)
    with pytest.raises(CorpusError, match=r"b1995.json: a symbolic link to .*secret.txt, outside the folder"):
        read_document_folder(folder)
    (folder / "b1995.json").unlink()
    (folder / "passwd.txt").symlink_to(secret)
    _refused(
        _cli("study", "run", "semantic_change", "--config", str(_semantic_change_config(tmp_path, folder))),
        "passwd.txt",
        "outside the folder",
    )
    assert not (Path(os.environ["BERTOLOGY_RESULTS"]) / "semantic_change").exists()


def test_4_a_year_written_as_a_string_is_an_error_naming_file_line_and_value(tmp_path):
    from bertology.corpus.documents import SliceSpec, read_document_folder, select_documents

    folder = _documents(tmp_path / "docs", {"a1901": 1901, "b1905": "1900", "c1910": 1910.0, "d1995": 1995})
    (folder / "nometa.txt").write_text("No metadata.", "utf-8")
    docs = read_document_folder(folder)
    early = SliceSpec.from_config("early", {"years": [1900, 1929]})
    with pytest.raises(CorpusError, match=r"b1905.json, line 3: field 'year' must be an integer year .*got '1900'"):
        select_documents(docs, early)
    (folder / "b1905.json").write_text(json.dumps({"year": 1905}), "utf-8")
    docs = read_document_folder(folder)
    assert [d.name for d in select_documents(docs, early)] == ["a1901", "b1905", "c1910"]  # 1910.0 is 1910
    (folder / "d1995.json").write_text(json.dumps({"year": 1995.5}), "utf-8")
    with pytest.raises(CorpusError, match=r"d1995.json, line 1: .*got 1995.5"):
        select_documents(read_document_folder(folder), early)  # every document's year is checked
    (folder / "d1995.json").write_text(json.dumps({"year": "1995"}), "utf-8")
    _refused(
        _cli("study", "run", "semantic_change", "--config", str(_semantic_change_config(tmp_path, folder))),
        "d1995.json, line 1",
        "'1995'",
    )


# --------------------------------------------------------------------------- 5. unknown values in study configs


@pytest.mark.parametrize(
    ("study", "field", "value", "needles"),
    [
        ("compression", "methods", ["importance", "magnitude"], ("field 'methods'", "'magnitude'", "l0")),
        ("compression", "max_share", 0, ("field 'max_share'", "(0, 1]", "got 0")),
        ("compression", "task", "nosuchtask", ("field 'task'", "'nosuchtask'")),
        ("compression", "mode", "turbo", ("field 'mode'", "'turbo'")),
        ("pruning", "max_share", 0, ("field 'max_share'", "got 0")),
        ("finetuning", "learning_rates", {"turbo": 1e-4}, ("field 'learning_rates'", "'turbo'", "bitfit")),
        ("finetuning", "tasks", ["pos", "nosuchtask"], ("field 'tasks'", "'nosuchtask'", "sotu-party")),
    ],
)
def test_5_unknown_values_are_refused_with_the_config(tmp_path, study, field, value, needles):
    from bertology.errors import ConfigError
    from bertology.studies import run_study

    config = tmp_path / f"{study}.yaml"
    config.write_text(yaml.safe_dump({field: value}))
    ran = []
    with pytest.raises(ConfigError) as refused:
        run_study(study, config_file=config, log=ran.append)
    assert not ran  # refused before any work
    for needle in needles:
        assert needle in str(refused.value), (needle, str(refused.value))
    assert not (Path(os.environ["BERTOLOGY_RESULTS"]) / study).exists()


def test_5_the_command_line_refuses_an_unknown_compression_method(tmp_path):
    config = tmp_path / "compression.yaml"
    config.write_text("methods: [importance, magnitude]\n")
    _refused(_cli("study", "run", "compression", "--config", str(config)), "field 'methods'", "'magnitude'")


def test_5_the_shipped_configs_and_a_task_file_still_pass(tmp_path):
    from bertology.runs import validate_config
    from bertology.studies import load_study

    task = tmp_path / "mine.jsonl"
    task.write_text('{"text": "a b", "label": "x"}\n')
    finetuning = load_study("finetuning")
    cfg = validate_config(
        finetuning.DEFAULTS, {"tasks": ["pos", str(task)], "learning_rates": {"full": 1e-4}}, "finetuning: t"
    )
    assert cfg["tasks"] == ["pos", str(task)]
    compression = load_study("compression")
    assert validate_config(compression.DEFAULTS, {"methods": ["importance", "l0"], "max_share": 0.5}, "compression: t")


# --------------------------------------------------------------------------- 6. fine-tuning labels


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), "utf-8")
    return path


def test_6_a_dev_or_test_label_unseen_in_train_is_an_error_naming_file_line_and_label(tmp_path):
    from bertology.finetuning.tasks import build_task

    records = [{"text": f"good words {i}", "label": "pos", "split": "train"} for i in range(4)]
    records += [{"text": f"bad words {i}", "label": "neg", "split": "train"} for i in range(4)]
    records += [{"text": "fine words", "label": "pos", "split": "dev"}]
    records += [
        {"text": "odd words", "label": "pos", "split": "test"},
        {"text": "new", "label": "neutral", "split": "test"},
    ]
    path = _jsonl(tmp_path / "sentiment.jsonl", records)
    with pytest.raises(CorpusError, match=r"sentiment.jsonl:11: label 'neutral' of a test example is in no train"):
        build_task(str(path))
    records[-1]["label"] = "neg"
    assert build_task(str(_jsonl(path, records))).labels == ["neg", "pos"]
    tokens = [{"words": ["a", "b"], "labels": ["X", "Y"], "split": s} for s in ("train", "train", "dev", "test")]
    tokens[2]["labels"] = ["X", "Z"]
    with pytest.raises(CorpusError, match=r"tokens.jsonl:3: label 'Z' of a dev example"):
        build_task(str(_jsonl(tmp_path / "tokens.jsonl", tokens)))
    csv = tmp_path / "pairs.csv"
    csv.write_text("text,label,split\na b,p,train\nc d,q,train\ne f,p,dev\ng h,r,test\n", "utf-8")
    with pytest.raises(CorpusError, match=r"pairs.csv:5: label 'r' of a test example"):
        build_task(str(csv))
    records[-1]["label"] = "neutral"
    _refused(
        _cli("finetune", "--task", str(_jsonl(path, records)), "--max-steps", "1", "--no-progress"),
        "sentiment.jsonl:11",
        "'neutral'",
    )


def test_6_labels_1_and_quoted_1_in_one_file_are_ambiguous(tmp_path):
    from bertology.finetuning.tasks import build_task

    records = [{"text": f"words {i}", "label": i % 2} for i in range(6)]
    assert build_task(str(_jsonl(tmp_path / "ints.jsonl", records))).labels == ["0", "1"]  # integers alone: fine
    records[4]["label"] = "1"
    records[5]["label"] = "0"
    with pytest.raises(CorpusError, match=r"mixed.jsonl:5: label '1' and label 1 \(.*mixed.jsonl:2\) are ambiguous"):
        build_task(str(_jsonl(tmp_path / "mixed.jsonl", records)))


def test_6_a_float_label_is_refused_saying_strings_or_integers_are_accepted(tmp_path):
    from bertology.finetuning.tasks import build_task

    records = [{"text": f"words {i}", "label": "a" if i % 2 else "b"} for i in range(6)]
    records[2]["label"] = 0.5
    with pytest.raises(CorpusError, match=r"floats.jsonl:3: needs 'label' \(a string or an integer, got 0.5\)"):
        build_task(str(_jsonl(tmp_path / "floats.jsonl", records)))


# --------------------------------------------------------------------------- 7: a resumed log window


def _training_rows(run_dir: Path) -> list[tuple]:
    """(step, metric, value) of metrics.jsonl, timing aside (tokens/s and MFU are wall-clock figures)."""
    rows = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        event = json.loads(line)
        for key, value in event.items():
            if key not in ("step", "tokens_per_s", "mfu", "time", "wall_s") and isinstance(value, (int, float)):
                rows.append((event["step"], key, value))
    return sorted(rows)


def test_7_a_resumed_pretraining_run_logs_the_same_window_losses(tmp_path):
    """Killed after step 3 (checkpoint 3), resumed: the log line at step 4 averages steps 1-4, as in
    the uninterrupted run, not only step 4."""
    from test_pretrain_trainer import _cfg, brown_documents, fixed_wordpiece, run_killed_after

    from bertology.pretraining import run_pretraining

    corpus = brown_documents(tmp_path / "brown.txt", 20)
    data = (corpus, fixed_wordpiece(corpus, tmp_path / "tok", vocab_size=300))
    kw = dict(max_steps=8, log_every=4, save_every=3, eval_every=8, keep_steps=[])
    full = run_pretraining(_cfg(data, tmp_path / "a", run_name="full", **kw))
    run_killed_after(_cfg(data, tmp_path / "b", run_name="killed", **kw), 3)
    resumed = run_pretraining(_cfg(data, tmp_path / "b", run_name="killed", **kw))
    assert _training_rows(resumed) == _training_rows(full)


def test_7_a_resumed_fine_tune_logs_the_same_window_losses(tmp_path):
    from test_finetuning import _cfg
    from test_finetuning import trainer as finetuning_trainer

    from bertology.finetuning import run_finetuning
    from bertology.testing import save_tiny_model_dir, write_planted_token_task

    write_planted_token_task(tmp_path / "token.jsonl")
    planted = {"model": save_tiny_model_dir("bert", tmp_path / "tiny-bert"), "token": tmp_path / "token.jsonl"}
    kw = dict(max_steps=8, eval_every=3, batch_size=8, keep_last=3, log_every=4)
    full = run_finetuning(_cfg(planted, tmp_path, run_name="full", **kw))

    class Killed(Exception):
        pass

    def end_of_step(done: int) -> None:
        if done >= 3:
            raise Killed(done)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(finetuning_trainer, "_end_of_step", end_of_step)
        with pytest.raises(Killed):
            run_finetuning(_cfg(planted, tmp_path, run_name="killed", **kw))
    resumed = run_finetuning(_cfg(planted, tmp_path, run_name="killed", **kw))
    assert _training_rows(resumed) == _training_rows(full)


# --------------------------------------------------------------------------- 8. left from round three


def test_8_a_folder_without_a_manifest_is_no_store_or_an_unfinished_one_not_damaged(tmp_path):
    """``bertology verify`` on an empty folder said "damaged"; on a started extraction too."""
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _cli("verify", str(empty))
    _refused(proc, f"{empty}: not a feature store (no manifest.json")
    assert "damaged" not in proc.stderr
    (empty / "plan.json").write_text("{}")
    (empty / "shard-00000.safetensors").write_bytes(b"")
    proc = _cli("verify", str(empty))
    _refused(proc, "an unfinished extraction, not a damaged store", "2 plan/shard file(s)", "to resume it")
    assert sorted(p.name for p in empty.iterdir()) == ["plan.json", "shard-00000.safetensors"]  # no mark left


def test_8_a_missing_teacher_or_init_model_is_refused_before_any_folder_is_made(tmp_path):
    config = tmp_path / "distil.yaml"
    config.write_text("objective: distill\nteacher: /nonexistent/teacher\nmax_steps: 5\n")
    home = tmp_path / "home"
    proc = _cli("pretrain", "--config", str(config), env={"BERTOLOGY_HOME": str(home)})
    _refused(proc, f"{config}: config field 'teacher'", "/nonexistent/teacher")
    assert not home.exists() or _tree(home) in ([], ["models"])  # no run folder
    config.write_text("init_from: no-such-model\nmax_steps: 5\n")
    proc = _cli("pretrain", "--config", str(config), env={"BERTOLOGY_HOME": str(home)})
    _refused(proc, "config field 'init_from'", "no-such-model")
    assert not home.exists() or _tree(home) in ([], ["models"])


def test_8_a_diverged_run_is_in_the_emergence_manifest_and_on_the_pretraining_page(tmp_path):
    """The run record's ``diverged`` entry (written by the loop; the CLI test of round three checks
    that) travels into the emergence study's manifest, and the Pretraining page says it."""
    from bertology.apps.pages.pretraining import divergence_note
    from bertology.studies.emergence import _divergence

    record = {"step": 17, "reason": "loss 40 stayed above 9", "learning_rate": 10.0, "last_good_checkpoint": 10}
    record["set_aside"] = ["diverged-checkpoint-12", "diverged-checkpoint-14"]
    (tmp_path / "run.json").write_text(json.dumps({"config": {}, "diverged": record}))
    assert _divergence(tmp_path) == record
    note = divergence_note(record)
    assert note is not None and "diverged at step 17" in note and "step 10" in note
    assert "diverged-checkpoint-12, diverged-checkpoint-14" in note
    assert divergence_note(None) is None
    (tmp_path / "run.json").write_text(json.dumps({"config": {}}))
    assert _divergence(tmp_path) is None and _divergence(tmp_path / "shipped-release-folder") is None


# --------------------------------------------------------------------------- numbers that move between machines

_CPUINFO = "processor\t: 0\nmodel name\t: {model}\nflags\t\t: fpu sse2 {flags}\n\nprocessor\t: 1\nmodel name\t: other\n"


@pytest.mark.parametrize(
    ("flags", "kind"),
    [
        ("avx2 fma avx512f avx512_bf16 amx_tile amx_bf16", "AMX"),
        ("avx2 fma avx512f avx512_bf16", "AVX-512 bf16"),
        ("avx2 fma avx512f", "AVX-512"),
        ("avx2 fma", "AVX2"),
        ("", "other"),
    ],
)
def test_the_machine_names_the_cpu_kind_that_picks_the_kernels(tmp_path, flags, kind):
    from bertology.machine import describe_machine, machine_summary

    info = tmp_path / "cpuinfo"
    info.write_text(_CPUINFO.format(model="Planted CPU 9000", flags=flags))
    machine = describe_machine(info)
    assert machine["cpu"] == "Planted CPU 9000" and machine["kind"] == kind
    assert machine["isa"] == [f for f in flags.split() if f in machine["isa"]] and set(machine["isa"]) <= set(
        flags.split()
    )
    assert machine["cores"] >= 1 and machine["gpu"] is None  # no CUDA here (and torch is never imported for it)
    line = machine_summary(machine, {"device": "cpu", "precision": "bfloat16"})
    assert line.startswith(f"Planted CPU 9000 ({kind}), {machine['cores']} cores") and line.endswith("; cpu, bfloat16")


def test_every_result_manifest_records_the_machine_and_the_precision_used(tmp_path):
    """A study's manifest (written by ``write_results``) carries ``machine`` with its one-line summary,
    which names the device and precision the store was computed with (``runs.compute_record``)."""
    import pandas as pd

    from bertology.results import read_manifest, write_results
    from bertology.runs import compute_record

    compute = compute_record("cpu", {"amp_dtype": None, "storage": "float16"})
    assert compute == {"device": "cpu", "precision": "float32", "storage": "float16"}
    write_results(tmp_path, {"t": pd.DataFrame({"a": [1]})}, {"study": "x", "compute": compute})
    machine = read_manifest(tmp_path)["machine"]
    assert {"cpu", "isa", "kind", "cores", "gpu", "summary"} <= set(machine)
    assert machine["summary"].endswith("; cpu, float32") and machine["cpu"] in machine["summary"]
    assert "torch" in read_manifest(tmp_path)["packages"] or "transformers" in read_manifest(tmp_path)["packages"]
