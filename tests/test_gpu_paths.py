"""Every core path on a CUDA device (issue 40), at tiny sizes, against the same computation on the
CPU: the feature store in every setting (float32 default, bf16 autocast with float16 storage,
sliding windows, non-finite values refused), inspection (the Live page), 'auto' precision, fine-tuning
in every mode with and without a weight mask, and pretraining with every objective.

All marked ``gpu``: skipped without CUDA (``scripts/gpu_check.sh`` runs them on a GPU machine);
``BERTOLOGY_GPU_TESTS_ON=cpu`` runs their bodies on the CPU, to check the tests themselves.

Tolerances: float32 on a GPU sums in another order than on a CPU (and cuBLAS may pick other
kernels), so hidden states of a 2-layer float32 model agree to ~1e-5 relative, not bit for bit; the
tests allow 1e-4 absolute on values of order 1. bf16 compute keeps ~3 significant digits: 0.1."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def minilm_tokenizer():
    """bert-mini-english's WordPiece tokenizer, shipped inside the package (a CUDA image need not
    have the MiniLM package that the CPU suite's tokenizer comes from)."""
    from bertology.testing import shipped_tokenizer

    return shipped_tokenizer()


def _extract(lm, corpus, root: Path, device: str, **kw):
    from bertology.store import extract

    return extract(lm, corpus, root=root, device=device, progress=False, **kw)


def test_store_default_settings_on_the_gpu_equal_the_cpu(tiny_lm, small_corpus, tmp_path, cuda):
    """The default extraction (float32, attention maps) used to crash on CUDA: an ``index_select``
    writing into a CPU shard buffer."""
    cpu = _extract(tiny_lm, small_corpus, tmp_path / "cpu", "cpu", shard_size=16)
    gpu = _extract(tiny_lm, small_corpus, tmp_path / "gpu", str(cuda), shard_size=16)
    assert next(tiny_lm.model.parameters()).device.type == cuda.type
    for i in range(len(small_corpus)):
        np.testing.assert_allclose(gpu.hidden(i), cpu.hidden(i), atol=1e-4, rtol=1e-4)
        np.testing.assert_allclose(gpu.attention(i), cpu.attention(i), atol=1e-5)
    same = np.mean([np.array_equal(gpu.token_offsets(i), cpu.token_offsets(i)) for i in range(len(small_corpus))])
    assert same >= 0.95  # argmax ties of a random model may break either way on either device


def test_store_bf16_float16_storage_and_small_shards(tiny_lm, small_corpus, tmp_path, cuda):
    cpu = _extract(tiny_lm, small_corpus, tmp_path / "cpu", "cpu")
    gpu = _extract(
        tiny_lm,
        small_corpus,
        tmp_path / "gpu",
        str(cuda),
        amp_dtype="bfloat16",
        storage="float16",
        shard_size=5,
        batch_tokens=128,
    )
    assert gpu.manifest["settings"]["amp_dtype"] == "bfloat16"
    for i in range(len(small_corpus)):
        np.testing.assert_allclose(gpu.hidden(i), cpu.hidden(i), atol=0.1, rtol=0.05)


def test_auto_precision_is_bfloat16_on_a_bf16_gpu(cuda):
    from bertology.runtime import cuda_bf16_supported, resolve_precision

    if cuda.type != "cuda":
        pytest.skip("CUDA only")
    expected = torch.bfloat16 if cuda_bf16_supported(cuda) else None
    assert resolve_precision("auto", cuda) == expected
    assert resolve_precision(None, cuda) is None


def test_store_sliding_windows_on_the_gpu(minilm_tokenizer, small_corpus, tmp_path, cuda):
    from bertology.models import from_modules
    from bertology.testing import make_tiny_bert

    lm = from_modules("tiny-bert-24", make_tiny_bert(minilm_tokenizer, max_positions=24), minilm_tokenizer)
    corpus = small_corpus
    assert max(len(s.words) for s in corpus.sentences) > 22  # some sentences need windows
    cpu = _extract(lm, corpus, tmp_path / "cpu", "cpu", attentions=False, long_policy="window")
    gpu = _extract(lm, corpus, tmp_path / "gpu", str(cuda), attentions=False, long_policy="window")
    for i in range(len(corpus)):
        np.testing.assert_allclose(gpu.hidden(i), cpu.hidden(i), atol=1e-4, rtol=1e-4)


def test_non_finite_hidden_states_are_refused_on_the_gpu(tiny_lm, small_corpus, tmp_path, cuda):
    from bertology.errors import StoreError

    with torch.no_grad():
        tiny_lm.model.embeddings.LayerNorm.weight.fill_(float("nan"))
    with pytest.raises(StoreError, match="non-finite values in hidden states for sentences"):
        _extract(tiny_lm, small_corpus, tmp_path / "gpu", str(cuda))
    assert not list((tmp_path / "gpu").rglob("manifest.json"))


def test_storage_overflow_is_refused_on_the_gpu(tiny_lm, small_corpus, tmp_path, cuda):
    from bertology.errors import StoreError

    with torch.no_grad():
        tiny_lm.model.embeddings.LayerNorm.bias.fill_(1e6)  # beyond float16's 65504
    with pytest.raises(StoreError, match="overflow"):
        _extract(tiny_lm, small_corpus, tmp_path / "gpu", str(cuda), storage="float16")


def test_inspection_on_the_gpu_equals_the_cpu(tiny_lm, cuda):
    from bertology.inspection import inspect_sentence

    words = "The old man saw the boat on the river".split()
    on_cpu = inspect_sentence(tiny_lm, words)
    tiny_lm.model.to(cuda)
    on_gpu = inspect_sentence(tiny_lm, words)
    np.testing.assert_allclose(on_gpu.attentions, on_cpu.attentions, atol=1e-5)
    np.testing.assert_allclose(on_gpu.word_attention, on_cpu.word_attention, atol=1e-5)
    np.testing.assert_allclose(on_gpu.special_attention, on_cpu.special_attention, atol=1e-5)
    np.testing.assert_allclose(on_gpu.queries, on_cpu.queries, atol=1e-4)


# --------------------------------------------------------------------------- fine-tuning


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict[str, Path]:
    from bertology.testing import save_tiny_model_dir, write_planted_token_task

    root = tmp_path_factory.mktemp("gpu-finetune")
    write_planted_token_task(root / "token.jsonl")
    return {"model": save_tiny_model_dir("bert", root / "tiny-bert"), "token": root / "token.jsonl"}


def _finetune_cfg(planted, root: Path, device: str, **kw):
    from bertology.finetuning import FinetuneConfig

    base = dict(
        run_name="ft",
        model=str(planted["model"]),
        task=str(planted["token"]),
        batch_size=16,
        epochs=1,
        learning_rate=1e-3,
        warmup_fraction=0.0,
        max_seq_len=32,
        output_root=str(root / "models"),
        progress=False,
        device=device,
    )
    return FinetuneConfig(**{**base, **kw})


@pytest.mark.parametrize("mode", ["full", "frozen", "bitfit", "adapters"])
def test_fine_tuning_every_mode_on_the_gpu(planted, tmp_path, cuda, mode):
    from bertology.finetuning import run_finetuning

    run = run_finetuning(_finetune_cfg(planted, tmp_path, str(cuda), mode=mode, run_name=mode))
    info = json.loads((run / "run.json").read_text())
    assert np.isfinite(info["result"]["test_accuracy"])


def test_a_masked_fine_tune_on_the_gpu_keeps_removed_weights_at_zero(planted, tmp_path, cuda):
    """The mask's gradient factor was made on the CPU before the model moved to the GPU."""
    from safetensors.torch import load_file

    from bertology.finetuning import run_finetuning
    from bertology.finetuning.heads import load_classifier
    from bertology.finetuning.masks import random_masks, save_masks

    masks = random_masks(load_classifier(planted["model"], "token", ["A", "B"]), 0.5, seed=1)
    save_masks(masks, tmp_path / "mask.safetensors")
    run = run_finetuning(_finetune_cfg(planted, tmp_path, str(cuda), weight_mask=str(tmp_path / "mask.safetensors")))
    (checkpoint,) = [p for p in run.iterdir() if p.name.startswith("checkpoint-")]
    trained = load_file(str(checkpoint / "model.safetensors"))
    for name, keep in masks.items():
        assert bool((trained[name][~keep] == 0).all()), name


# --------------------------------------------------------------------------- pretraining

OBJECTIVES = {
    "mlm": dict(),
    "mlm+nsp": dict(objective="mlm+nsp"),
    "sbo": dict(objective="mlm+sbo", masking="span"),
    "electra": dict(objective="electra", generator_size=0.5),
    "albert": dict(architecture="albert", objective="mlm+sop", embedding_size=16, masking="ngram"),
    "whole_word": dict(masking="whole_word"),
}


@pytest.fixture(scope="module")
def pretrain_data(tmp_path_factory):
    from test_pretrain_trainer import brown_documents, fixed_wordpiece

    d = tmp_path_factory.mktemp("gpu-pt")
    out = brown_documents(d / "brown30.txt", 30)
    return out, fixed_wordpiece(out, d / "tok", vocab_size=300)


def _pretrain_cfg(data, root: Path, device: str, **kw):
    """test_pretrain_trainer's tiny config, 4 steps on ``device``, saved at the end only."""
    from test_pretrain_trainer import _cfg

    fields = dict(
        max_steps=4,
        warmup_steps=1,
        learning_rate=1e-3,
        log_every=2,
        eval_every=4,
        save_every=4,
        keep_steps=[],
        device=device,
    )
    return _cfg(data, root, **{**fields, **kw})


@pytest.mark.parametrize("objective", list(OBJECTIVES))
def test_pretraining_every_objective_on_the_gpu(pretrain_data, tmp_path, cuda, objective):
    from bertology.pretraining import read_metrics, run_pretraining

    run = run_pretraining(
        _pretrain_cfg(pretrain_data, tmp_path, str(cuda), run_name=objective.replace("+", "-"), **OBJECTIVES[objective])
    )
    metrics = read_metrics(run)
    losses = metrics[metrics.metric == "loss"].value
    assert len(losses) and np.isfinite(losses).all()
    assert (run / "checkpoint-4" / "model.safetensors").is_file()


def test_pretraining_on_the_gpu_follows_the_cpu(pretrain_data, tmp_path, cuda):
    """Same data, same initial weights: the first logged loss agrees (float32, different kernels)."""
    from bertology.pretraining import read_metrics, run_pretraining

    losses = {}
    for device in ("cpu", str(cuda)):
        run = run_pretraining(_pretrain_cfg(pretrain_data, tmp_path / device, device, bf16=False))
        m = read_metrics(run)
        losses[device] = m[m.metric == "loss"].value.to_numpy()
    np.testing.assert_allclose(losses[str(cuda)], losses["cpu"], rtol=2e-3)
