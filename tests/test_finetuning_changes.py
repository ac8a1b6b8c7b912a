"""What fine-tuning changes, with known answers: linear CKA (Kornblith et al. 2019) and the
per-layer relative weight change ||ΔW|| / ||W||."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bertology.errors import ConfigError
from bertology.finetuning.changes import module_kind, relative_weight_change
from bertology.similarity import linear_cka


def test_cka_is_one_for_identical_and_invariant_to_rotation_and_scale():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 8))
    assert linear_cka(x, x) == pytest.approx(1.0, abs=1e-12)
    q, _ = np.linalg.qr(rng.normal(size=(8, 8)))  # a random orthogonal matrix
    y = rng.normal(size=(50, 5))
    base = linear_cka(x, y)
    assert 0 < base < 1
    assert linear_cka(x @ q, y) == pytest.approx(base, abs=1e-12)
    assert linear_cka(3.7 * x, 0.2 * y) == pytest.approx(base, abs=1e-12)
    assert linear_cka(x + 5.0, y) == pytest.approx(base, abs=1e-12)  # centring
    # not invariant to an arbitrary invertible linear map
    a = np.diag([10.0, 1, 1, 1, 1, 1, 1, 0.1])
    assert abs(linear_cka(x @ a, y) - base) > 1e-3
    # wide representations (d > n) take the other Gram matrix: same value
    wide = rng.normal(size=(6, 40))
    assert linear_cka(wide, wide @ np.linalg.qr(rng.normal(size=(40, 40)))[0]) == pytest.approx(1.0, abs=1e-12)


def test_cka_matches_a_hand_computed_value():
    # centred columns; Y^T X = [2, 0] -> 4; ||X^T X|| = 2; Y^T Y = [[2, 0], [0, 6]] -> sqrt(40)
    x = np.array([[-1.0], [0.0], [1.0]])
    y = np.array([[-1.0, 1.0], [0.0, -2.0], [1.0, 1.0]])
    assert linear_cka(x, y) == pytest.approx(4 / (2 * math.sqrt(40)), abs=1e-12)  # = 1 / sqrt(10)
    assert math.isnan(linear_cka(np.ones((3, 2)), y))
    with pytest.raises(ConfigError, match="same items"):
        linear_cka(x, y[:2])


def test_module_kinds():
    assert module_kind("bert.embeddings.word_embeddings.weight") == (-1, "embeddings")
    assert module_kind("encoder.layer.3.attention.self.query.weight") == (3, "attention")
    assert module_kind("encoder.layer.3.attention.output.dense.bias") == (3, "attention")
    assert module_kind("encoder.layer.3.attention.output.LayerNorm.weight") == (3, "layernorm")
    assert module_kind("bert.encoder.layer.0.intermediate.dense.weight") == (0, "ffn")
    assert module_kind("encoder.layer.0.output.dense.weight") == (0, "ffn")
    for other in (
        "classifier.weight",
        "bert.pooler.dense.weight",
        "cls.predictions.bias",
        "bert.encoder.layer.0.output.adapter.down.weight",
    ):
        assert module_kind(other) is None


def test_relative_weight_change_is_the_groups_norm_ratio():
    gen = torch.Generator().manual_seed(0)
    before = {
        "encoder.layer.0.attention.self.query.weight": torch.randn(4, 4, generator=gen),
        "encoder.layer.0.attention.self.key.weight": torch.randn(4, 4, generator=gen),
        "encoder.layer.0.intermediate.dense.weight": torch.randn(8, 4, generator=gen),
        "embeddings.word_embeddings.weight": torch.randn(10, 4, generator=gen),
    }
    after = {f"bert.{k}": v.clone() for k, v in before.items()}
    after["bert.encoder.layer.0.attention.self.query.weight"] *= 1.5  # ΔW = 0.5 W on one attention tensor
    after["classifier.weight"] = torch.ones(2, 4)  # head: no "before", left out
    table = relative_weight_change(before, after).set_index(["layer", "module"])
    q, k = before["encoder.layer.0.attention.self.query.weight"], before["encoder.layer.0.attention.self.key.weight"]
    expected = 0.5 * float(q.norm()) / math.sqrt(float(q.norm()) ** 2 + float(k.norm()) ** 2)
    # the table numbers layers as everywhere: 0 = embeddings, encoder.layer.0 = transformer layer 1
    assert table.loc[(1, "attention"), "relative_change"] == pytest.approx(expected, rel=1e-6)
    assert table.loc[(1, "attention"), "n_tensors"] == 2
    assert table.loc[(1, "ffn"), "relative_change"] == 0.0
    assert table.loc[(0, "embeddings"), "relative_change"] == 0.0
    assert len(table) == 3


def test_layer_cka_is_one_after_a_frozen_fine_tune_and_falls_after_a_full_one(tmp_path):
    import json
    import random

    from bertology.checkpoints import list_checkpoints
    from bertology.corpus import Corpus, Sentence
    from bertology.finetuning import FinetuneConfig, run_finetuning
    from bertology.finetuning.changes import layer_cka
    from bertology.models import load_model
    from bertology.testing import TINY_WORDS, save_tiny_model_dir

    model_dir = save_tiny_model_dir("bert", tmp_path / "tiny-bert")
    rng = random.Random(0)
    sentences = [[rng.choice(TINY_WORDS[:40]) for _ in range(6)] for _ in range(60)]
    task = tmp_path / "words.jsonl"
    task.write_text(
        "".join(
            json.dumps({"words": w, "labels": ["A" if x in TINY_WORDS[:20] else "B" for x in w]}) + "\n"
            for w in sentences
        )
    )
    held_out = Corpus(
        "held-out", [Sentence(f"h{i}", [rng.choice(TINY_WORDS[:40]) for _ in range(5)]) for i in range(20)]
    )
    pretrained = load_model(model_dir)
    table = {}
    for mode in ("frozen", "full"):
        run = run_finetuning(
            FinetuneConfig(
                run_name=mode,
                model=str(model_dir),
                task=str(task),
                mode=mode,
                max_steps=6,
                batch_size=8,
                learning_rate=3e-3,
                output_root=str(tmp_path / "models"),
                progress=False,
            )
        )
        ((_, path),) = list_checkpoints(run)
        table[mode] = layer_cka(pretrained, load_model(path), held_out, root=tmp_path / "stores")
    frozen, full = table["frozen"], table["full"]
    assert list(frozen.layer) == [0, 1, 2] and (frozen.n_words == 100).all()
    assert frozen.cka.to_numpy() == pytest.approx(1.0, abs=1e-9)  # the encoder did not move
    assert full.cka.iloc[-1] < 1 - 1e-6 and ((full.cka > 0) & (full.cka <= 1 + 1e-9)).all()
