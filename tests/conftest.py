"""Shared fixtures: tiny random BERT models built in-process, a small slice of the bundled corpus."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def pytest_configure(config):
    """Under pytest-xdist (``-n N``) the N workers share the cores: each worker's torch (and the
    processes its tests start, through ``OMP_NUM_THREADS``) gets cores / N threads, not every core
    (two workers of two threads each on 2 cores ran slower than one worker)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        threads = max(1, (os.cpu_count() or 1) // workers)
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need a CUDA device: skipped (with the reason) where there is none."""
    import torch

    if torch.cuda.is_available() or os.environ.get("BERTOLOGY_GPU_TESTS_ON") == "cpu":
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (scripts/gpu_check.sh runs the gpu tests on one)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cuda():
    """The CUDA device, for tests marked ``gpu``. ``BERTOLOGY_GPU_TESTS_ON=cpu`` runs those tests'
    bodies on the CPU instead (a check of the tests themselves on a machine without a GPU)."""
    import torch

    return torch.device(os.environ.get("BERTOLOGY_GPU_TESTS_ON", "cuda"))


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    """Keep stores, trained models and results of every test out of the user's folders; hub names
    see an empty Hugging Face cache of their own and never the network (tests/test_hub_models.py
    turns the hub on against a local stand-in)."""
    home = tmp_path_factory.mktemp("bertology_home")
    monkeypatch.setenv("BERTOLOGY_HOME", str(home))
    monkeypatch.setenv("BERTOLOGY_RESULTS", str(home / "results"))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hf-hub-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def one_torch_thread():
    """Small probes run faster on one thread on a busy 2-core machine; restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def minilm_tokenizer():
    """The real MiniLM WordPiece tokenizer (fast), used with tiny random models."""
    from transformers import AutoTokenizer

    from bertology.models import embedded_models

    return AutoTokenizer.from_pretrained(embedded_models()["minilm-l6"]["path"])


@pytest.fixture
def tiny_lm(minilm_tokenizer):
    """A LoadedModel wrapping a tiny random 2-layer, 4-head BERT with the MiniLM tokenizer."""
    from bertology.models import from_modules
    from bertology.testing import make_tiny_bert

    return from_modules("tiny-bert", make_tiny_bert(minilm_tokenizer), minilm_tokenizer)


@pytest.fixture(scope="session")
def small_corpus():
    from bertology.corpus import load_corpus

    return load_corpus("brown-sample", limit=40)


@pytest.fixture(scope="session")
def quickstart_results(tmp_path_factory):
    """Run the tour study (the quickstart's runner with every study) once with tiny configs
    (tests/fixtures/tiny_quickstart); the results root."""
    from bertology.studies import run_study

    root = tmp_path_factory.mktemp("results")
    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("BERTOLOGY_HOME", str(home))
    try:
        run_study(
            "tour",
            overrides={"configs": str(FIXTURES / "tiny_quickstart"), "second_model": ""},
            results_root=root,
            log=lambda m: None,
        )
        # the structural probe joins the quickstart (not the tour): its tiny run beside the tour's
        run_study(
            "structural_probe",
            config_file=FIXTURES / "tiny_quickstart" / "structural_probe.yaml",
            run_id="tour-seed0",
            results_root=root,
            log=lambda m: None,
        )
    finally:
        mp.undo()
    # semantic_change needs documents the quickstart does not have offline (the State of the Union
    # addresses come with --with-pretraining-corpus): its page reads a planted run
    from dashboard_planted import compression_run, finetuning_run, patching_run, semantic_change_run

    semantic_change_run(root)
    finetuning_run(root)  # beside the quickstart's tiny fine-tune, a run with every mode and two seeds
    compression_run(root)  # nor compress a fine-tuned model: the Compression page reads a planted run
    patching_run(root)  # nor patch the shipped MLM over 120 pairs: the Patching page reads a planted run
    return root


def shipped_release(name: str) -> dict:
    """The registry entry of a model the package ships (``data/models/<name>``); fails naming the folder."""
    from bertology import paths
    from bertology.models import shipped_releases

    info = shipped_releases().get(name)
    assert info is not None, f"{name} is not shipped in {paths.shipped_models_dir()}"
    return info
