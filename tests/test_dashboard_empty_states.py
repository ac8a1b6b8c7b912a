"""Every study page either has a run after the quickstart or names the one command that makes one,
with its time (issue 43): the commands name studies and shipped configs that exist and validate;
the dashboard's reads are kept per version of each file."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pandas as pd
import pytest

from bertology.apps import locations
from bertology.apps.pages import PAGES
from bertology.runs import read_config_file, validate_config
from bertology.studies import list_studies, load_study

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_studies_are_the_quickstarts_own():
    cfg = load_study("quickstart").DEFAULTS
    assert set(locations.QUICKSTART_STUDIES) == set(cfg["studies"]) | set(cfg["second_model_studies"])


def test_every_study_page_has_a_quickstart_run_or_a_command():
    studies = {p.study for p in PAGES if p.study is not None}
    without = studies - set(locations.QUICKSTART_STUDIES)
    assert {"feature_combinations", "semantic_change", "compression"} <= without
    assert set(locations.FILL_COMMANDS) == without, "a page the quickstart leaves empty names no command"
    for study in studies:
        text = locations.how_to_fill(study)
        command, took = locations.FILL_COMMANDS.get(study, locations.QUICKSTART)
        assert f"`{command}` ({took})" in text and "minute" in took


@pytest.mark.parametrize("study", sorted(locations.FILL_COMMANDS))
def test_each_command_names_a_study_and_a_shipped_config_that_validates(study, tmp_path, monkeypatch):
    """Each suggested command works from any folder of an installed package: no path into the source
    checkout, a shipped config by name (resolved here from an empty folder), no setup script."""
    from bertology.cli import app
    from bertology.studies import default_config_file, resolve_config_file

    monkeypatch.chdir(tmp_path)  # not the checkout
    command = locations.FILL_COMMANDS[study][0].split("&&")[-1]
    words = shlex.split(command)
    assert words[:3] == ["bertology", "study", "run"] and words[3] == study and study in list_studies()
    assert "scripts/" not in locations.FILL_COMMANDS[study][0] and "studies/configs" not in command
    name = words[words.index("--config") + 1] if "--config" in words else None
    config = resolve_config_file(name) if name else default_config_file(study)
    assert config.is_file() and config.stem == study
    validate_config(load_study(study).DEFAULTS, read_config_file(config), str(config))
    if command != locations.FILL_COMMANDS[study][0]:  # the data first: a bertology command
        setup = shlex.split(locations.FILL_COMMANDS[study][0].split("&&")[0])
        assert setup[:3] == ["bertology", "build-corpus", "--out"]
        assert "build-corpus" in {c.name for c in app.registered_commands}


def test_a_shipped_config_is_found_by_name_from_any_folder(tmp_path, monkeypatch):
    from bertology.studies import config_dir, resolve_config_file

    monkeypatch.chdir(tmp_path)
    shipped = config_dir() / "tour" / "feature_combinations.yaml"
    for name in (
        "tour/feature_combinations",
        "tour/feature_combinations.yaml",
        "studies/configs/tour/feature_combinations.yaml",
    ):
        assert resolve_config_file(name) == shipped
    (tmp_path / "mine.yaml").write_text("seed: 1\n")
    assert resolve_config_file("mine.yaml").samefile(tmp_path / "mine.yaml")  # a real file wins
    assert resolve_config_file("tour/nothing") == type(shipped)("tour/nothing")  # the reader names it missing
    assert resolve_config_file("../studies/configs/patching") == type(shipped)("../studies/configs/patching")


def test_a_manifest_is_read_again_only_when_it_changes(tmp_path):
    run = tmp_path / "study" / "run"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text('{"seed": 1}')
    first = locations.read_manifest(run)
    first["seed"] = 99  # a copy: the caller may change it
    assert locations.read_manifest(run) == {"seed": 1}
    (run / "manifest.json").write_text('{"seed": 22}')
    os.utime(run / "manifest.json", ns=(1, 1))  # another version of the file: another stamp
    assert locations.read_manifest(run) == {"seed": 22}
    (run / "manifest.json").unlink()
    with pytest.raises(locations.ResultError, match="no manifest.json"):
        locations.read_manifest(run)


def test_a_table_is_read_once_per_version(tmp_path, monkeypatch):
    from bertology.apps import ui

    pd.DataFrame({"a": [1, 2]}).to_parquet(tmp_path / "t.parquet")
    reads = []
    real = ui.read_table
    monkeypatch.setattr(ui, "read_table", lambda run, name: reads.append(name) or real(run, name))
    assert ui.load_table(tmp_path, "t")["a"].tolist() == [1, 2]
    assert ui.load_table(tmp_path, "t")["a"].tolist() == [1, 2]
    assert reads == ["t"]
    pd.DataFrame({"a": [3]}).to_parquet(tmp_path / "t.parquet")
    os.utime(tmp_path / "t.parquet", ns=(2, 2))
    assert ui.load_table(tmp_path, "t")["a"].tolist() == [3] and reads == ["t", "t"]
