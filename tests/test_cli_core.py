"""The bertology CLI: help texts, clear errors with exit code 2, extract end to end."""

from __future__ import annotations

import subprocess
import sys

from cli_inprocess import run_cli
from typer.testing import CliRunner

from bertology.cli import app

runner = CliRunner()


def test_help_lists_core_commands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for cmd in ("models", "extract", "annotate", "corpus", "study", "dashboard"):
        assert cmd in result.output


def test_models_lists_embedded_minilm():
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0 and "minilm-l6" in result.output


def test_unknown_model_is_one_clear_line_and_exit_2():
    proc = subprocess.run(
        [sys.executable, "-m", "bertology.cli", "extract", "--model", "nope", "--limit", "2"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "error: unknown model 'nope'" in proc.stderr and "Traceback" not in proc.stderr


def test_annotate_writes_silver_conllu(tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("The old man saw the boat.\n\nIt sank in Boston.\n")
    out = tmp_path / "out.conllu"
    result = runner.invoke(app, ["annotate", str(text), "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert "silver" in result.output and out.read_text().count("# sent_id") == 2
    assert "silver" in (tmp_path / "out.meta.json").read_text()


def test_extract_refuses_an_unknown_storage_dtype():
    proc = run_cli("extract", "--storage", "int8", "--limit", "2")  # in-process: the same main()
    assert proc.returncode == 2
    assert "storage must be 'float32' or 'float16'" in proc.stderr and "Traceback" not in proc.stderr
    help_text = runner.invoke(app, ["extract", "--help"]).output
    assert "--amp" in help_text and "--storage" in help_text


def test_a_bad_option_type_is_a_usage_error_not_a_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "bertology.cli", "prune", "--limit", "x"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "Invalid value for '--limit'" in proc.stderr and "Traceback" not in proc.stderr


def test_a_file_where_an_output_folder_is_needed_is_one_clear_line(tmp_path):
    """``--out`` / ``--output-root`` / ``--output`` naming an existing file, or an output file naming a
    folder: one ``error:`` line naming the path (was a NotADirectoryError traceback from mkdir)."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    text = tmp_path / "in.txt"
    text.write_text("The old man saw the boat.\n")
    for args in (
        ("heads", "--out", str(a_file), "--limit", "5"),
        ("pretrain", "--max-steps", "1", "--output-root", str(a_file)),
        ("tokenizer", "train", "--input", str(text), "--output", str(a_file), "--vocab-size", "50"),
    ):
        proc = run_cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert f"{a_file} is a file, where a folder is needed" in proc.stderr, (args, proc.stderr)
    proc = run_cli("annotate", str(text), "--output", str(tmp_path))
    assert proc.returncode == 2 and f"error: {tmp_path} is a folder: give the path of a file" in proc.stderr
    assert a_file.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "notes.txt"]
