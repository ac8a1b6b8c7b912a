"""Sweeps (bertology.sweeps): the sweep file's checks, every cell validated before any runs, the
local backend (resume, failures, retries) on a toy study in-process, and -- marked slow -- a local
Ray with two workers on two cores running edge probing of tiny random models: the same tables as a
serial local run, a worker killed mid-cell retried to the same result, a failing cell recorded while
the others complete, and a rerun skipping every complete cell."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import types
from pathlib import Path

import pandas as pd
import pytest
from cli_inprocess import run_cli

from bertology import sweeps
from bertology.errors import ConfigError, WorkbenchError
from bertology.studies import _sweeps

# --------------------------------------------------------------------------- a toy study, in-process

CALLS: list[tuple[float, int]] = []


def _toy_run(ctx) -> None:
    """Writes one ``summary`` row; ``value`` 13 raises a RuntimeError (a crash), 17 a ConfigError."""
    value = ctx.config["value"]
    CALLS.append((value, ctx.seed))
    if value == 13:
        raise RuntimeError("unlucky value 13")
    if value == 17:
        raise ConfigError("value 17 is refused by the study")
    ctx.step("summary", lambda: pd.DataFrame({"task": ["t"], "score": [value + ctx.seed]}))


@pytest.fixture
def toy(monkeypatch):
    """Study ``toysweep`` (fields ``value`` float, ``seed``) registered for the test."""
    import bertology.studies as studies

    module = types.ModuleType("bertology.studies.toysweep")
    module.DESCRIPTION, module.DEFAULTS, module.run = "toy", {"value": 1.0, "seed": 0}, _toy_run
    monkeypatch.setitem(sys.modules, "bertology.studies.toysweep", module)
    names = studies._names()
    monkeypatch.setattr(studies, "_names", lambda: sorted([*names, "toysweep"]))
    CALLS.clear()
    return "toysweep"


def _sweep(study: str, grid: dict, **more) -> sweeps.Sweep:
    return _sweeps.parse_sweep({"name": "s", "study": study, "grid": grid, **more})


def test_the_grid_expands_as_nested_loops_in_the_files_order():
    cells = sweeps.expand_grid({"model": ["a", "b"], "seed": [0, 1, 2]})
    assert len(cells) == 6
    assert cells[:4] == [
        {"model": "a", "seed": 0},
        {"model": "a", "seed": 1},
        {"model": "a", "seed": 2},
        {"model": "b", "seed": 0},
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "s", "study": "edge_probing", "grid": {"model": ["a"]}, "extra": 1}, "unknown field 'extra'"),
        ({"name": "s", "study": "edge_probing"}, "field 'grid' is required"),
        ({"name": "../s", "study": "edge_probing", "grid": {"seed": [0]}}, "not a plain name"),
        ({"name": "s", "study": "nope", "grid": {"seed": [0]}}, "unknown study 'nope'"),
        ({"name": "s", "study": "edge_probing", "grid": {"layers": [1]}}, "grid field 'layers' is not a field"),
        ({"name": "s", "study": "edge_probing", "grid": {"limit": []}}, "non-empty list"),
        ({"name": "s", "study": "edge_probing", "grid": {"limit": [5, 5]}}, "repeats the value 5"),
        ({"name": "s", "study": "edge_probing", "grid": {"seed": [0, -1]}}, "integers >= 0"),
        (
            {"name": "s", "study": "edge_probing", "config": {"limit": 5}, "grid": {"limit": [5, 6]}},
            "both in 'config' and in 'grid'",
        ),
        ({"name": "s", "study": "edge_probing", "grid": {"seed": [0]}, "max_retries": -1}, "max_retries"),
        ({"name": "s", "study": "edge_probing", "grid": {"seed": [0]}, "resources": {"cpus": 0}}, "resources.cpus"),
        ({"name": "s", "study": "edge_probing", "grid": {"seed": [0]}, "resources": {"ram": 1}}, "resources"),
    ],
)
def test_a_bad_sweep_file_is_refused_naming_the_field(data, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _sweeps.parse_sweep(data)


def test_load_sweep_reads_the_shipped_example():
    sweep = _sweeps.load_sweep(Path(__file__).resolve().parents[1] / "examples" / "sweep_tiny.yaml")
    assert (sweep.name, sweep.study) == ("tiny", "edge_probing")
    assert sweep.grid == {"model": ["minilm-l6", "bert-mini-english"], "seed": [0, 1]}
    assert sweep.max_retries == 2 and sweep.cpus == 1


def test_an_invalid_grid_value_is_refused_before_any_cell_runs(toy, tmp_path):
    sweep = _sweep(toy, {"value": [1.0, "lots"]})
    with pytest.raises(ConfigError, match=r"cell value=lots: .*field 'value' must be a number"):
        _sweeps.run_sweep(sweep, backend="local", results_root=tmp_path, log=lambda m: None)
    assert CALLS == [] and not any(tmp_path.iterdir())  # nothing ran, nothing was written


def test_an_invalid_grid_value_of_a_real_study_is_refused_with_its_own_rules(tmp_path):
    sweep = _sweep("edge_probing", {"limit": [40, -3]}, config={"tasks": ["pos"]})
    with pytest.raises(ConfigError, match=r"cell limit=-3: .*limit"):
        _sweeps.run_sweep(sweep, backend="local", results_root=tmp_path, log=lambda m: None)
    sweep = _sweep("edge_probing", {"tasks": [["pos"], ["pos", "colour"]]})
    with pytest.raises(ConfigError, match=r"colour"):
        _sweeps.prepare_cells(sweep, tmp_path)
    assert not any(tmp_path.iterdir())


def test_a_local_sweep_runs_every_cell_as_a_study_run_and_resumes(toy, tmp_path):
    from bertology.studies import run_study

    sweep = _sweep(toy, {"value": [1.0, 2.0], "seed": [0, 1]})
    lines: list[str] = []
    table = _sweeps.run_sweep(sweep, backend="local", results_root=tmp_path, log=lines.append)
    assert "sweep s: 0 of 4 cells complete" in lines and "sweep s: 4 of 4 cells complete" in lines
    assert list(table["status"]) == ["complete"] * 4
    assert list(table["value"]) == [1.0, 1.0, 2.0, 2.0] and list(table["seed"]) == [0, 1, 0, 1]
    # each cell is the run `study run` makes for the same config and seed
    assert (
        table["run"][3]
        == f"{toy}/" + run_study(toy, overrides={"value": 2.0}, seed=1, results_root=tmp_path, log=lambda m: None).name
    )
    scores = [pd.read_parquet(tmp_path / run / "summary.parquet")["score"][0] for run in table["run"]]
    assert scores == [1.0, 2.0, 2.0, 3.0]
    cells = pd.read_parquet(tmp_path / "sweeps" / "s" / "cells.parquet")
    pd.testing.assert_frame_equal(cells, table)
    # a rerun runs nothing; one cell made incomplete again is the only one run
    CALLS.clear()
    lines.clear()
    _sweeps.run_sweep(sweep, backend="local", results_root=tmp_path, log=lines.append)
    assert CALLS == [] and lines[0] == "sweep s: 4 of 4 cells complete"
    (tmp_path / table["run"][2] / "manifest.json").unlink()
    (tmp_path / table["run"][2] / "summary.parquet").unlink()
    lines.clear()
    again = _sweeps.run_sweep(sweep, backend="local", results_root=tmp_path, log=lines.append)
    assert CALLS == [(2.0, 0)] and lines[0] == "sweep s: 3 of 4 cells complete"
    pd.testing.assert_frame_equal(again.drop(columns="seconds"), table.drop(columns="seconds"))


def test_a_failing_cell_is_recorded_with_its_error_and_the_others_complete(toy, tmp_path):
    sweep = _sweep(toy, {"value": [1.0, 13.0, 17.0, 2.0]}, max_retries=2)
    lines: list[str] = []
    table = _sweeps.run_sweep(sweep, backend="local", results_root=tmp_path, log=lines.append)
    assert list(table["status"]) == ["complete", "failed", "failed", "complete"]
    assert table["error"][1] == "RuntimeError: unlucky value 13"
    assert table["error"][2] == "ConfigError: value 17 is refused by the study"
    # a crash is tried 1 + max_retries times; a workbench error (bad input) fails at once
    assert [v for v, _ in CALLS].count(13.0) == 3 and [v for v, _ in CALLS].count(17.0) == 1
    assert "sweep s: 2 of 4 cells complete, 2 failed" in lines
    status = run_cli("sweep", "status", "s", env={"BERTOLOGY_RESULTS": str(tmp_path)})
    assert status.returncode == 0
    assert "2 of 4 cells complete" in status.stdout and "RuntimeError: unlucky value 13" in status.stdout
    # a rerun tries the failed cells again, not the complete ones
    CALLS.clear()
    _sweeps.run_sweep(sweep, backend="local", results_root=tmp_path, log=lambda m: None)
    assert sorted({v for v, _ in CALLS}) == [13.0, 17.0]


def test_the_sweeps_folder_is_never_listed_nor_cleaned_as_a_run(toy, tmp_path):
    from bertology.runs import list_runs, remove_unfinished_runs

    _sweeps.run_sweep(_sweep(toy, {"value": [1.0]}), backend="local", results_root=tmp_path, log=lambda m: None)
    assert set(list_runs(tmp_path)["study"]) == {toy}
    remove_unfinished_runs(tmp_path)
    assert (tmp_path / "sweeps" / "s" / "cells.parquet").is_file()


def test_cli_errors_are_one_line(toy, tmp_path):
    missing = run_cli("sweep", "status", "nothing", env={"BERTOLOGY_RESULTS": str(tmp_path)})
    assert missing.returncode == 2 and missing.stderr.startswith("error: no sweep 'nothing'")
    (tmp_path / "s.yaml").write_text("name: s\nstudy: edge_probing\ngrid: {seed: [0]}\n")
    both = run_cli("sweep", "run", str(tmp_path / "s.yaml"), "--backend", "local", "--address", "auto")
    assert both.returncode == 2 and "--address joins a Ray cluster" in both.stderr
    other = run_cli("sweep", "run", str(tmp_path / "s.yaml"), "--backend", "slurm")
    assert other.returncode == 2 and "backend 'slurm'" in other.stderr


def test_headline_figures_come_from_the_studys_summary_table(tmp_path):
    from bertology import results

    results.write_table(
        tmp_path,
        "summary",
        pd.DataFrame(
            {
                "task": ["pos"],
                "best_layer": [2],
                "best_layer_score": [0.9],
                "best_layer_low": [0.8],
                "best_layer_high": [0.95],
                "mix_score": [float("nan")],
            }
        ),
    )
    figures = sweeps.headline("edge_probing", tmp_path)
    assert figures.to_dict("records")[0] == {
        "item": "pos",
        "figure": "best_layer_score",
        "value": 0.9,
        "low": 0.8,
        "high": 0.95,
    }
    assert list(figures["figure"]) == ["best_layer_score", "best_layer"]  # no mix: no row
    assert sweeps.headline("toysweep", tmp_path).empty


# --------------------------------------------------------------------------- on Ray, edge probing

TINY = {
    "tasks": ["pos"],
    "limit": 40,
    "modes": ["per_layer"],
    "seeds": [0],
    "max_epochs": 2,
    "control": False,
    "mdl_tasks": [],
    "random_baseline_tasks": [],
}


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    from bertology.testing import save_tiny_model_dir

    root = tmp_path_factory.mktemp("models")
    return [str(save_tiny_model_dir("bert", root / f"m{seed}", seed=seed)) for seed in (0, 1)]


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def serial(tiny_models, tmp_path_factory):
    """The 2 models x 2 seeds sweep run with the local backend: (results root, cells table)."""
    root = tmp_path_factory.mktemp("serial")
    mp = pytest.MonkeyPatch()
    mp.setenv("BERTOLOGY_HOME", str(tmp_path_factory.mktemp("serial_home")))
    try:
        sweep = _sweep("edge_probing", {"model": tiny_models, "seed": [0, 1]}, config=TINY)
        table = _sweeps.run_sweep(sweep, backend="local", results_root=root, log=lambda m: None)
    finally:
        mp.undo()
    assert list(table["status"]) == ["complete"] * 4
    return root, table


def _same_cells(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.drop(columns="seconds"), b.drop(columns="seconds"))


def _same_run_tables(run: str, root: Path, other: Path) -> None:
    """A cell's study tables equal another run's: the summary byte for byte, the layer scores but
    for the probes' timings (their ``seconds`` rows)."""
    assert (root / run / "summary.parquet").read_bytes() == (other / run / "summary.parquet").read_bytes()
    scores, others = (pd.read_parquet(r / run / "layer_scores.parquet") for r in (root, other))
    untimed = scores["metric"] != "seconds"
    assert untimed.sum() >= 10
    pd.testing.assert_frame_equal(scores[untimed], others[others["metric"] != "seconds"])


@pytest.mark.slow
def test_a_ray_sweep_gives_the_tables_of_a_serial_local_run(local_ray, serial, tiny_models, tmp_path):
    serial_root, serial_cells = serial
    sweep = _sweep("edge_probing", {"model": tiny_models, "seed": [0, 1]}, config=TINY)
    lines: list[str] = []
    cells = _sweeps.run_sweep(sweep, backend="ray", results_root=tmp_path, log=lines.append)
    _same_cells(cells, serial_cells)
    summary = pd.read_parquet(tmp_path / "sweeps" / "s" / "summary.parquet")
    pd.testing.assert_frame_equal(summary, pd.read_parquet(serial_root / "sweeps" / "s" / "summary.parquet"))
    assert set(summary["figure"]) >= {"best_layer_score", "best_layer"} and len(summary) >= 8
    for run in cells["run"]:  # the cells' own study tables
        _same_run_tables(run, tmp_path, serial_root)
    # one feature store per model, extracted once before the cells that read it
    assert len(list((Path(os.environ["BERTOLOGY_HOME"]) / "stores").iterdir())) == 2
    # a rerun skips every complete cell without starting any task
    lines.clear()
    again = _sweeps.run_sweep(sweep, backend="ray", results_root=tmp_path, log=lines.append)
    assert lines[0] == "sweep s: 4 of 4 cells complete" and not any("running" in line for line in lines)
    _same_cells(again, cells)


def _kill_first_cell(root: Path, killed: list[int], stop: threading.Event) -> None:
    """kill -9 the process running the first cell to start (its run folder's lock names its pid)."""
    while not stop.is_set():
        for inputs in root.glob("edge_probing/*/inputs.json"):
            pid = int((inputs.parent / ".lock").read_text().split()[0])
            if pid != os.getpid():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
        time.sleep(0.02)


@pytest.mark.slow
def test_a_worker_killed_mid_cell_is_retried_to_the_same_result(local_ray, serial, tiny_models, tmp_path):
    serial_root, serial_cells = serial
    sweep = _sweep("edge_probing", {"model": tiny_models[:1], "seed": [0, 1]}, config=TINY, max_retries=2)
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_first_cell, args=(tmp_path, killed, stop), daemon=True)
    killer.start()
    try:
        cells = _sweeps.run_sweep(sweep, backend="ray", results_root=tmp_path, log=lambda m: None)
    finally:
        stop.set()
        killer.join()
    assert len(killed) == 1
    assert list(cells["status"]) == ["complete", "complete"]
    _same_cells(cells, serial_cells.iloc[:2])
    for run in cells["run"]:
        _same_run_tables(run, tmp_path, serial_root)
    logs = [p.read_text() for p in (tmp_path / "sweeps" / "s" / "logs").glob("*.log")]
    assert sorted(log.count("running into") for log in logs) == [1, 2]  # the killed cell ran twice


@pytest.mark.slow
def test_a_failing_cell_on_ray_is_recorded_while_the_others_complete(local_ray, tiny_models, tmp_path):
    sweep = _sweep(
        "edge_probing",
        {"limit": [40, 2]},
        config={**{k: v for k, v in TINY.items() if k != "limit"}, "model": tiny_models[0]},
        max_retries=1,
    )
    lines: list[str] = []
    cells = _sweeps.run_sweep(sweep, backend="ray", max_parallel=1, results_root=tmp_path, log=lines.append)
    assert list(cells["status"]) == ["complete", "failed"]
    assert cells["error"][1] == "TaskError: task 'pos': needs at least 3 sentences with targets to split, has 2"
    assert pd.isna(cells["error"][0]) and not (tmp_path / cells["run"][1]).exists()
    assert "sweep s: 1 of 2 cells complete, 1 failed" in lines


@pytest.mark.slow
def test_a_driver_killed_mid_sweep_is_finished_by_a_rerun(serial, tiny_models, tmp_path):
    """kill -9 of ``bertology sweep run`` while its second cell runs; the same command finishes the
    rest, with the tables of the uninterrupted serial sweep."""
    import subprocess

    import yaml

    serial_root, serial_cells = serial
    spec = {"name": "s", "study": "edge_probing", "config": TINY, "grid": {"model": tiny_models[:1], "seed": [0, 1]}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    results_root = tmp_path / "results"
    env = {**os.environ, "BERTOLOGY_RESULTS": str(results_root)}
    driver = subprocess.Popen(
        [sys.executable, "-m", "bertology.cli", "sweep", "run", str(tmp_path / "s.yaml"), "--backend", "local"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    second = results_root / serial_cells["run"][1] / "inputs.json"
    deadline = time.monotonic() + 300
    while not second.is_file() and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    driver.kill()
    driver.wait()
    assert second.is_file() and not (second.parent / "manifest.json").is_file()  # killed mid-cell
    lines: list[str] = []
    sweep = _sweeps.load_sweep(tmp_path / "s.yaml")
    cells = _sweeps.run_sweep(sweep, backend="local", results_root=results_root, log=lines.append)
    assert lines[0] == "sweep s: 1 of 2 cells complete"
    _same_cells(cells, serial_cells.iloc[:2])
    for run in cells["run"]:
        _same_run_tables(run, results_root, serial_root)


def test_a_missing_ray_is_a_clear_error(monkeypatch, toy, tmp_path):
    monkeypatch.setattr(sweeps, "ray_available", lambda: False)
    with pytest.raises(WorkbenchError, match=r"needs Ray: install the sweep extra"):
        _sweeps.run_sweep(_sweep(toy, {"value": [1.0]}), backend="ray", results_root=tmp_path, log=lambda m: None)
    # where Ray is not installed, local is the default
    table = _sweeps.run_sweep(_sweep(toy, {"value": [1.0]}), results_root=tmp_path, log=lambda m: None)
    assert list(table["status"]) == ["complete"]


# --------------------------------------------------------------------------- the Sweeps page


def _planted_sweep(root: Path) -> None:
    """Sweep ``grid3``: model a/b x seed 0/1 x limit 40/80 of edge_probing, best-layer score
    ``0.5 + 0.1 * (model b) + 0.01 * seed + 0.001 * (limit 80)``; cell model=b, seed=1, limit=80 failed."""
    import json

    from bertology import results

    folder = root / "sweeps" / "grid3"
    folder.mkdir(parents=True)
    grid = {"model": ["a", "b"], "seed": [0, 1], "limit": [40, 80]}
    (folder / "sweep.json").write_text(json.dumps({"name": "grid3", "study": "edge_probing", "grid": grid}))
    rows = [dict(zip(grid, combo, strict=True)) for combo in sweeps.expand_grid(grid) for combo in [combo.values()]]
    cells = pd.DataFrame(rows)
    cells.insert(0, "cell", range(len(cells)))
    failed = (cells["model"] == "b") & (cells["seed"] == 1) & (cells["limit"] == 80)
    cells["status"] = ["failed" if f else "complete" for f in failed]
    cells["run"] = [f"edge_probing/r{i}-seed{s}" for i, s in zip(cells["cell"], cells["seed"], strict=True)]
    cells["seconds"] = 1.0
    cells["error"] = pd.array([("TaskError: too few" if f else None) for f in failed], dtype="string")
    results.write_table(folder, "cells", cells)
    done = cells[~failed]
    value = 0.5 + 0.1 * (done["model"] == "b") + 0.01 * done["seed"] + 0.001 * (done["limit"] == 80)
    summary = done[["model", "seed", "limit", "run"]].assign(
        item="pos", figure="best_layer_score", value=value, low=value - 0.05, high=value + 0.05
    )
    results.write_table(folder, "summary", summary.reset_index(drop=True))


def test_the_sweep_heatmap_puts_each_cell_at_its_grid_values(tmp_path):
    from bertology.apps.pages.sweeps import facets, sweep_heatmap

    _planted_sweep(tmp_path)
    summary = pd.read_parquet(tmp_path / "sweeps" / "grid3" / "summary.parquet")
    parts = facets(summary, ["limit"])
    assert [label for label, _ in parts] == ["limit=40", "limit=80"]
    fig = sweep_heatmap(parts[1][1], "model", "seed", "t")
    z = fig.data[0].z
    assert [list(map(str, fig.data[0].x)), list(map(str, fig.data[0].y))] == [["a", "b"], ["0", "1"]]
    assert z[0][0] == pytest.approx(0.501) and z[0][1] == pytest.approx(0.601) and z[1][0] == pytest.approx(0.511)
    assert z[1][1] is None  # the failed cell
    assert "0.601 [0.551, 0.651]" in fig.data[0].hovertext[0][1] and "edge_probing/r" in fig.data[0].hovertext[0][1]


def test_the_sweeps_page_shows_a_heatmap_per_value_of_the_other_field(tmp_path, monkeypatch):
    from dashboard_planted import chart_specs
    from streamlit.testing.v1 import AppTest

    app = str(Path(__file__).resolve().parents[1] / "apps" / "dashboard.py")
    monkeypatch.setenv("BERTOLOGY_RESULTS", str(tmp_path))
    at = AppTest.from_file(app, default_timeout=60)
    at.run()
    at.sidebar.radio(key="page").set_value("Sweeps").run()
    assert not at.exception and any("No sweeps under" in i.value for i in at.info)
    _planted_sweep(tmp_path)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    specs = chart_specs(at)
    assert [s["layout"]["title"]["text"] for s in specs] == [
        "best_layer_score · pos · limit=40",
        "best_layer_score · pos · limit=80",
    ]
    assert any("7 of 8 cells complete" in m.value for m in at.markdown)
    links = at.dataframe[-1].value["open"]
    assert links.iloc[0] == "?page=Probing&run=edge_probing/r0-seed0" and links.isna().sum() == 1


def test_a_cells_link_opens_its_run_on_its_studys_page(tmp_path, monkeypatch):
    from dashboard_planted import age, probing_run
    from streamlit.testing.v1 import AppTest

    older = probing_run(tmp_path, "p-old", "model-a")
    age(older, 100)
    probing_run(tmp_path, "p-new", "model-b")
    monkeypatch.setenv("BERTOLOGY_RESULTS", str(tmp_path))
    app = str(Path(__file__).resolve().parents[1] / "apps" / "dashboard.py")
    for link, shown in ((None, "p-new"), ("edge_probing/p-old", "p-old")):  # a link opens a fresh session
        at = AppTest.from_file(app, default_timeout=60)
        at.query_params["page"] = "Probing"
        if link:
            at.query_params["run"] = link
        at.run()
        assert not at.exception and Path(at.selectbox[0].value).name == shown  # without a link: the newest


def test_a_ray_failure_is_one_line_with_the_cells_own_exception_where_ray_kept_it():
    class TaskFailed(Exception):  # Ray's RayTaskError carries the task's exception as `cause`
        cause = ValueError("bad value in cell")

    assert sweeps._ray_error(TaskFailed("Traceback ...\n...")) == "ValueError: bad value in cell"
    crashed = RuntimeError("\nThe worker died unexpectedly while executing this task.\nmore detail")
    assert sweeps._ray_error(crashed) == "RuntimeError: The worker died unexpectedly while executing this task."


@pytest.mark.parametrize(
    ("study", "table", "columns", "expected"),
    [
        (
            "structural_probe",
            "summary",
            {"probe": ["distance", "distance"], "metric": ["uuas", "uuas"], "encoder": ["trained", "random"]}
            | {"score": [0.7, 0.2], "low": [0.6, 0.1], "high": [0.8, 0.3]},
            ("distance uuas", "score", 0.7, 0.6, 0.8),
        ),
        (
            "finetuning",
            "finetune_scores",
            {"task": ["pos"], "mode": ["full"], "accuracy": [0.9], "low": [0.85], "high": [0.95]},
            ("pos / full", "accuracy", 0.9, 0.85, 0.95),
        ),
        (
            "head_types",
            "attention_probe",
            {"method": ["attention"], "uas": [0.4], "uas_low": [0.3], "uas_high": [0.5]},
            ("attention", "uas", 0.4, 0.3, 0.5),
        ),
        (
            "alignment",
            "precision",
            {"k": [1, 5], "retrieval": ["csls", "csls"], "value": [0.5, 0.8], "low": [0.4, 0.7], "high": [0.6, 0.9]},
            ("mapping / csls", "P@1", 0.5, 0.4, 0.6),
        ),
        (
            "pruning",
            "pruning_threshold_summary",
            {"method": ["importance"], "tolerance": [0.01], "removable_share": [0.4]},
            ("importance @ 0.01", "removable_share", 0.4, None, None),
        ),
        (
            "contextuality",
            "contextuality",
            {"layer": [0, 6], "metric": ["self_similarity"] * 2, "adjusted": [0.9, 0.3]},
            ("self_similarity", "adjusted_last_layer", 0.3, None, None),
        ),
    ],
)
def test_each_studys_headline_figure_is_read_from_its_own_table(tmp_path, study, table, columns, expected):
    from bertology import results

    results.write_table(tmp_path, table, pd.DataFrame(columns))
    figures = sweeps.headline(study, tmp_path)
    assert len(figures) == 1
    row = figures.iloc[0]
    item, figure, value, low, high = expected
    assert (row["item"], row["figure"], row["value"]) == (item, figure, pytest.approx(value))
    assert pd.isna(row["low"]) if low is None else row["low"] == pytest.approx(low)
    assert pd.isna(row["high"]) if high is None else row["high"] == pytest.approx(high)


def test_a_cell_gets_the_drivers_folders_and_hub_settings_never_a_token(toy, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERTOLOGY_HOME", "home")  # relative: sent resolved, as the driver sees it
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_TOKEN", "secret")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)  # (conftest points it into the test home)
    context = sweeps.worker_context(_sweep(toy, {"value": [1.0]}, resources={"cpus": 2}))
    assert context.environment == {
        "BERTOLOGY_HOME": str(tmp_path.resolve() / "home"),
        "HF_HOME": str((tmp_path / "hf").resolve()),
        "HF_HUB_OFFLINE": "1",
    }
    assert context.cwd == str(tmp_path) and context.threads == 2
