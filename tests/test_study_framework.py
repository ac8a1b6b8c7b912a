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
    return run_analysis("toy", "toy study", toy_analysis, validate_config(DEFAULTS, config, "test"), seed=0,
                        run_dir=tmp_path / "res" / "toy" / "run1", log=lambda m: None, **kw)


def test_validate_config_names_the_field():
    defaults = {"n": 3, "rate": 0.5, "layers": [1, 2]}
    assert validate_config(defaults, {"rate": 1}, "f.yaml")["rate"] == 1
    with pytest.raises(ConfigError, match="f.yaml: unknown field 'nn'"):
        validate_config(defaults, {"nn": 1}, "f.yaml")
    with pytest.raises(ConfigError, match="field 'n' must be int"):
        validate_config(defaults, {"n": "three"}, "f.yaml")
    with pytest.raises(ConfigError, match="field 'n' must be int"):
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
