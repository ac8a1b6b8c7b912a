"""Config values are checked where they enter (issue 17.4): the table in ``bertology.validation``
covers every numeric field of every study, accepts the shipped configs, and refuses bad values
naming the study, the field and the value."""

from __future__ import annotations

import re

import pytest

from bertology.errors import ConfigError
from bertology.runs import read_config_file, validate_config
from bertology.studies import config_dir, list_studies, load_study, run_study
from bertology.validation import FIELD_RULES, check_values, rule_for, study_from_source


def _numeric(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    return isinstance(value, (list, tuple)) and bool(value) and all(_numeric(v) for v in value)


def test_every_numeric_default_field_has_a_rule():
    """A study that gains a numeric field without a rule fails here (so none is forgotten)."""
    missing = [
        (name, field)
        for name in list_studies()
        for field, value in load_study(name).DEFAULTS.items()
        if _numeric(value) and rule_for(field, name) is None
    ]
    assert missing == []
    # "limit" is numeric even where its default is None
    assert all(rule_for("limit", name) for name in list_studies() if "limit" in load_study(name).DEFAULTS)


def test_defaults_and_shipped_configs_pass():
    for name in list_studies():
        check_values(load_study(name).DEFAULTS, f"{name}: defaults")
    files = sorted(config_dir().rglob("*.yaml"))
    assert len(files) >= 10
    for path in files:
        study = path.stem
        validate_config(load_study(study).DEFAULTS, read_config_file(path), f"{study}: {path}")


@pytest.mark.parametrize(
    "study,field,value,what",
    [
        ("head_types", "limit", -2990, "an integer >= 1"),  # corpus[:-2990] was "the first 10 sentences"
        ("edge_probing", "limit", 0, "an integer >= 1"),
        ("head_types", "positional_threshold", 1.5, r"a number in \[0, 1\]"),
        ("head_types", "syntactic_margin", -0.1, r"a number in \[0, 1\]"),
        ("head_types", "min_count", -3, "an integer >= 1"),
        ("head_types", "example_sentences", -1, "an integer >= 0"),
        ("pruning", "step", 0.0, r"a number in \(0, 1\]"),
        ("pruning", "random_seeds", 0, "an integer >= 1"),
        ("pruning", "tolerances", [0.01, -0.05], "a list of numbers >= 0"),
        ("edge_probing", "seeds", [0, -1], "a list of integers"),
        ("edge_probing", "max_epochs", 0, "an integer >= 1"),
        ("contextuality", "neighbours_k", -8, "an integer >= 1"),
        ("alignment", "n_train", -5000, "an integer >= 1"),
        ("alignment", "layer_pair", [1], "two layer indices"),
        ("align_spaces", "top", -20, "an integer >= 0"),
        ("emergence", "cloze_sentences", -12, "an integer >= 0"),
    ],
)
def test_bad_values_are_refused_naming_study_field_and_value(study, field, value, what, tmp_path):
    with pytest.raises(
        ConfigError,
        match=rf"^{study}: command line: field '{field}' must be {what}.*"
        rf"got {re.escape(repr(value))}$",
    ):
        run_study(study, overrides={field: value}, results_root=tmp_path)
    assert not (tmp_path / study).exists()  # refused before a run folder was made


def test_a_bad_value_in_a_config_file_names_the_file(tmp_path):
    bad = tmp_path / "mine.yaml"
    bad.write_text("limit: -2990\n")
    with pytest.raises(ConfigError, match=r"^head_types: .*mine.yaml: field 'limit' must be .*got -2990$"):
        run_study("head_types", config_file=bad, results_root=tmp_path)


def test_cross_field_rule():
    with pytest.raises(
        ConfigError,
        match="contextuality: x.yaml: min_occurrences must be <= max_occurrences, "
        "got min_occurrences=60, max_occurrences=50",
    ):
        check_values({"min_occurrences": 60, "max_occurrences": 50}, "contextuality: x.yaml")


def test_rule_details():
    assert FIELD_RULES["limit"].accepts(None) and FIELD_RULES["limit"].accepts(1)
    assert not FIELD_RULES["limit"].accepts(True)  # a bool is not a count
    assert not FIELD_RULES["positional_threshold"].accepts(float("nan"))
    assert FIELD_RULES["export_layers"].accepts([0, -1])  # negative layer indices count from the end
    assert not FIELD_RULES["seed"].accepts(2**32)
    assert study_from_source("pruning: command line") == "pruning"
    assert study_from_source("/x/studies/configs/quickstart/pruning.yaml") == "pruning"
    assert study_from_source("my.yaml") is None
    with pytest.raises(ConfigError, match=r"^test: field 'limit'"):  # no study known: the source alone
        check_values({"limit": -1}, "test")


@pytest.mark.parametrize(
    "options,message",
    [
        ({"limit": -2990}, r"--limit must be >= 0 .*got -2990"),
        ({"max_epochs": 0}, r"--max-epochs must be >= 1, got 0"),
        ({"device": "gpu"}, r"--device must be cpu or cuda, got 'gpu'"),
        ({"seeds": "0,-1"}, r"--seeds must be integers >= 0"),
    ],
)
def test_probe_command_options_are_checked(options, message):
    from bertology.cli.probe import probe_overrides
    from bertology.errors import WorkbenchError

    with pytest.raises(WorkbenchError, match=message):
        probe_overrides(**options)
    assert probe_overrides(limit=0) == {"limit": None}  # 0 = the whole corpus


def test_probe_device_cuda_without_a_gpu(monkeypatch):
    import torch

    from bertology.cli.probe import probe_overrides

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="--device cuda: no CUDA device is available"):
        probe_overrides(device="cuda")
    assert probe_overrides(device="cpu") == {"device": "cpu"}
