"""Study runner: config validation naming the field, resumable steps, provenance manifest."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.errors import ConfigError
from workbench.results import read_manifest, read_table
from workbench.study import run_study, validate_config

STUDY = '''
DESCRIPTION = "toy study"
DEFAULTS = {"n": 3, "rate": 0.5, "name": "x", "seed": 0}
CALLS = []

def run(ctx):
    import pandas as pd
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
'''


def test_validate_config_names_the_field():
    defaults = {"n": 3, "rate": 0.5, "layers": [1, 2]}
    assert validate_config(defaults, {"rate": 1}, "f.yaml")["rate"] == 1
    with pytest.raises(ConfigError, match="f.yaml: unknown field 'nn'"):
        validate_config(defaults, {"nn": 1}, "f.yaml")
    with pytest.raises(ConfigError, match="field 'n' must be int"):
        validate_config(defaults, {"n": "three"}, "f.yaml")
    with pytest.raises(ConfigError, match="field 'n' must be int"):
        validate_config(defaults, {"n": True}, "f.yaml")


def test_run_study_writes_manifest_and_resumes(tmp_path, monkeypatch):
    studies = tmp_path / "studies"
    studies.mkdir()
    (studies / "toy.py").write_text(STUDY)
    (tmp_path / "c.yaml").write_text("n: 5\n")
    monkeypatch.setenv("BERTOLOGY_STUDIES", str(studies))
    run_dir = run_study("toy", config_file=tmp_path / "c.yaml", results_root=tmp_path / "res", log=lambda m: None)
    manifest = read_manifest(run_dir)
    assert manifest["config"]["n"] == 5 and manifest["seed"] == 0 and "packages" in manifest
    assert manifest["tables"] == ["a", "b", "numbers"] and manifest["model"] == {"name": "none"}
    assert len(read_table(run_dir, "b")) == 2
    assert len(read_table(run_dir, "numbers")) == 5
    # an interrupted run (no manifest) resumes from the saved step
    (run_dir / "manifest.json").unlink()
    again = run_study("toy", config_file=tmp_path / "c.yaml", results_root=tmp_path / "res", log=lambda m: None)
    assert again == run_dir and (run_dir / "manifest.json").is_file()
    assert read_manifest(again)["tables"] == ["a", "b", "numbers"]  # reused steps are still listed
    pd.testing.assert_frame_equal(read_table(again, "numbers"), read_table(run_dir, "numbers"))
    (tmp_path / "bad.yaml").write_text("rate: [1\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        run_study("toy", config_file=tmp_path / "bad.yaml", results_root=tmp_path / "res")
