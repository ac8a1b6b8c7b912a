"""Shared fixtures: tiny random BERT models built in-process, a small slice of the bundled corpus."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    """Keep stores, trained models and results of every test out of the user's folders."""
    home = tmp_path_factory.mktemp("bertology_home")
    monkeypatch.setenv("BERTOLOGY_HOME", str(home))
    monkeypatch.setenv("BERTOLOGY_RESULTS", str(home / "results"))


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

    from workbench.models import embedded_models

    return AutoTokenizer.from_pretrained(embedded_models()["minilm-l6"]["path"])


def make_tiny_bert(tokenizer, *, layers: int = 2, heads: int = 4, hidden: int = 32, seed: int = 0,
                   max_positions: int = 64, mlm: bool = False):
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertModel

    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=2 * hidden,
                        max_position_embeddings=max_positions, attn_implementation="eager")
    torch.manual_seed(seed)
    model = (BertForMaskedLM if mlm else BertModel)(config)
    return model.eval()


@pytest.fixture
def tiny_lm(minilm_tokenizer):
    """A LoadedModel wrapping a tiny random 2-layer, 4-head BERT with the MiniLM tokenizer."""
    from workbench.models import from_modules

    return from_modules("tiny-bert", make_tiny_bert(minilm_tokenizer), minilm_tokenizer)


@pytest.fixture(scope="session")
def small_corpus():
    from workbench.corpus import load_corpus

    return load_corpus("brown-sample", limit=40)


@pytest.fixture(scope="session")
def quickstart_results(tmp_path_factory):
    """Run the quickstart study once with tiny configs (tests/fixtures/tiny_quickstart); the results root."""
    from workbench.study import run_study

    root = tmp_path_factory.mktemp("results")
    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("BERTOLOGY_HOME", str(home))
    try:
        run_study("quickstart", overrides={"configs": "../tests/fixtures/tiny_quickstart"}, results_root=root,
                  log=lambda m: None)
    finally:
        mp.undo()
    return root
