"""The English BERT the workbench ships (made by its own trainer): listed, loadable, float16 on disk,
within the size budget, and better at masked words than its first checkpoint."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import shipped_release

from bertology.models import list_models, load_model

NAME = "bert-mini-english"
pytestmark = [pytest.mark.real_model, pytest.mark.slow]


@pytest.fixture(scope="module")
def release():
    return shipped_release(NAME)


def test_release_is_listed_with_its_checkpoints_and_fits_the_budget(release):
    names = set(list_models()["name"])
    steps = sorted(release["steps"])
    assert len(steps) >= 5 and steps[0] == 0
    assert {NAME} | {f"{NAME}@{s}" for s in steps} <= names
    size = sum(f.stat().st_size for f in release["path"].rglob("*") if f.is_file())
    assert size <= 60 * 2**20, size
    card = json.loads((release["path"] / "release.json").read_text())
    final = card["checkpoints"][-1]
    assert final["eval_loss"] < card["unigram_baseline"] - 0.5  # well below the unigram baseline
    assert (release["path"] / "README.md").is_file() and (release["path"] / "metrics.jsonl").is_file()


def test_loads_in_float32_and_predicts_masked_words_better_than_at_step_0(release):
    from safetensors import safe_open

    from bertology.corpus import load_corpus
    from bertology.probes.heads.importance import mask_batches, mean_loss, mlm_loss

    final_dir = release["steps"][release["final"]]
    with safe_open(str(final_dir / "model.safetensors"), "pt") as fh:
        assert {fh.get_slice(k).get_dtype() for k in fh.keys()} == {"F16"}
    losses = {}
    for name in (f"{NAME}@0", NAME):
        lm = load_model(name, mlm_head=True, attentions=False)
        assert all(p.dtype == torch.float32 for p in lm.model.parameters())
        tok = lm.tokenizer
        words = [s.words for s in load_corpus("brown-sample", limit=64)]
        batches = [
            {
                k: v
                for k, v in tok(
                    words[i : i + 16],
                    is_split_into_words=True,
                    truncation=True,
                    max_length=128,
                    padding=True,
                    return_tensors="pt",
                ).items()
                if k in ("input_ids", "attention_mask", "token_type_ids")
            }
            for i in range(0, 64, 16)
        ]
        masked = mask_batches(batches, tok.mask_token_id, len(tok), list(tok.all_special_ids), seed=0)
        losses[name] = mean_loss(lm.model, masked, mlm_loss)
    assert losses[NAME] < losses[f"{NAME}@0"] - 2.0, losses  # learned English: far better than at init
