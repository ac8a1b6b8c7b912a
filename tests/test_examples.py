"""The walkthroughs in examples/ (probing, heads, alignment) run end to end at a tiny size."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.real_model
def test_probing_walkthrough_runs(tmp_path):
    env = dict(os.environ, WALKTHROUGH_SENTENCES="40", WALKTHROUGH_EPOCHS="1", BERTOLOGY_HOME=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "probing_walkthrough.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "expected_layer_mix" in proc.stdout and "layer-4 POS accuracy" in proc.stdout


@pytest.mark.slow
@pytest.mark.real_model
@pytest.mark.parametrize(
    "script, sentences, expected",
    [
        ("heads_walkthrough.py", "60", ["positional", "accuracy_low", "gain_p_value", "[layers, heads, words, words]"]),
        ("alignment_walkthrough.py", "100", ["AlignmentResult(procrustes", "precision", "source_neighbours"]),
    ],
)
def test_heads_and_alignment_walkthroughs_run(tmp_path, script, sentences, expected):
    env = dict(os.environ, WALKTHROUGH_SENTENCES=sentences, BERTOLOGY_HOME=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script)], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for text in expected:
        assert text in proc.stdout, (text, proc.stdout[-2000:])
