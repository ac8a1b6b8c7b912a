"""Activation patching (bertology.probes.patching): a planted head found by patching it and no other,
identities (the clean run into itself, the last layer at the target, the embeddings at the only
changed token), every architecture of the table, the metric's edge cases, the minimal pairs, the
study, the CLI and the dashboard's figures."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from bertology.errors import ConfigError, ModelError
from bertology.models import LoadedModel, from_modules
from bertology.probes.patching import (
    PatchingError,
    agreement_pairs,
    encode_pair,
    head_scores,
    hidden_state_scores,
    pair_scores,
    patch_heads,
    patch_hidden_states,
    restored_fraction,
)
from bertology.testing import tiny_model, tiny_tokenizer

CLEAN, CORRUPTED = "the dog [MASK] here .", "the dogs [MASK] here ."
SUBJECT, MASK = 2, 3  # token positions in [CLS] the dog [MASK] here . [SEP]
PLANTED_LAYER, PLANTED_HEAD = 0, 1  # 0-based array position of the planted head
NAMED = (1, 2)  # its (layer, head) numbers in the tables, both from 1


def tiny_lm(model_type: str = "bert", **kw) -> LoadedModel:
    return from_modules(model_type, tiny_model(model_type, mlm=True, **kw), tiny_tokenizer(model_type))


def float_tolerance(clean: float, corrupted: float) -> float:
    """How far a restored fraction may stray from its exact value: float32 logits (relative error
    ~1e-6 after a few operations, more where batches of other sizes pick other kernels) divided by
    the clean - corrupted difference."""
    return 1e-5 * max(1.0, abs(clean), abs(corrupted)) / abs(clean - corrupted)


@pytest.fixture(scope="module")
def planted() -> LoadedModel:
    """A 2-layer, 4-head tiny BERT whose answer reaches the masked token through one head: every
    other head of layer 0 and every head of layer 1 have their output-projection columns at zero
    (their outputs never reach the residual stream), and the planted head's values and output are
    scaled up so that the clean - corrupted difference is large."""
    lm = tiny_lm("bert", layers=2, heads=4, hidden=32)
    attention = lm.model.bert.encoder.layer
    d = 32 // 4
    with torch.no_grad():
        for head in range(4):
            if head != PLANTED_HEAD:
                attention[0].attention.output.dense.weight[:, head * d : (head + 1) * d] = 0
        attention[1].attention.output.dense.weight.zero_()
        rows = slice(PLANTED_HEAD * d, (PLANTED_HEAD + 1) * d)
        attention[0].attention.self.value.weight[rows] *= 30
        attention[0].attention.output.dense.weight[:, rows] *= 30
    return lm


def test_the_planted_head_and_no_other_restores_the_score(planted):
    heads = patch_heads(planted, CLEAN, CORRUPTED, "is", "are")
    clean, corrupted = heads["clean_score"].iloc[0], heads["corrupted_score"].iloc[0]
    assert abs(clean - corrupted) > 0.01  # the planted difference is there to restore (~1e-4 unscaled)
    tol = float_tolerance(clean, corrupted)
    restored = heads.set_index(["layer", "head"])["restored"]
    assert restored[NAMED] == pytest.approx(1.0, abs=tol)
    others = restored.drop(NAMED)
    assert len(others) == 7 and np.allclose(others, 0.0, atol=tol)


def test_the_planted_head_matters_at_the_mask_only(planted):
    at_mask = patch_heads(planted, CLEAN, CORRUPTED, "is", "are", position=MASK).set_index(["layer", "head"])
    at_subject = patch_heads(planted, CLEAN, CORRUPTED, "is", "are", position=SUBJECT).set_index(["layer", "head"])
    tol = float_tolerance(at_mask["clean_score"].iloc[0], at_mask["corrupted_score"].iloc[0])
    assert at_mask.loc[NAMED, "restored"] == pytest.approx(1.0, abs=tol)
    # layer 1 reads no other token (its heads are silenced): the planted head's output at the subject is never read
    assert np.allclose(at_subject["restored"], 0.0, atol=tol)
    assert at_mask["position"].iloc[0] == MASK


def test_hidden_states_of_the_planted_model_restore_where_they_must(planted):
    states = patch_hidden_states(planted, CLEAN, CORRUPTED, "is", "are")
    grid = states.pivot(index="layer", columns="position", values="restored").to_numpy()  # [3, 7]
    tol = float_tolerance(states["clean_score"].iloc[0], states["corrupted_score"].iloc[0])
    expected = np.zeros_like(grid)
    expected[0, SUBJECT] = 1.0  # the embeddings differ at the subject only
    expected[1:, MASK] = 1.0  # after layer 0, only the mask's own state reaches the readout
    assert np.allclose(grid, expected, atol=tol)
    assert list(states.loc[states["layer"] == 0, "token"]) == ["[CLS]", "the", "dog", "[MASK]", "here", ".", "[SEP]"]
    assert states.loc[states["position"] == SUBJECT, "token_corrupted"].iloc[0] == "dogs"


@pytest.mark.parametrize("model_type", ["bert", "roberta", "albert", "distilbert", "mpnet", "modernbert"])
def test_identities_hold_for_each_architecture(model_type):
    """Clean into itself gives the clean score at every site (every patched row run, none skipped);
    the last layer at the target and the embeddings at the only changed token restore 1; a head's
    patch gives the same score in a batch of all the layer's heads as alone."""
    lm = tiny_lm(model_type)
    itself = encode_pair(lm, CLEAN, CLEAN, "is", "are")
    run = pair_scores(lm, itself)
    scores = hidden_state_scores(lm, itself, run, skip_unchanged=False)
    assert scores.shape == (lm.num_layers + 1, itself.length)
    assert np.allclose(scores, run.clean_score, rtol=0, atol=1e-6 * max(1.0, abs(run.clean_score)))
    pair = encode_pair(lm, CLEAN, CORRUPTED, "is", "are")
    run = pair_scores(lm, pair)
    restored = restored_fraction(
        hidden_state_scores(lm, pair, run, skip_unchanged=False), run.clean_score, run.corrupted_score
    )
    tol = float_tolerance(run.clean_score, run.corrupted_score)
    changed = [i for i, (a, b) in enumerate(zip(pair.tokens_clean, pair.tokens_corrupted)) if a != b]
    assert len(changed) == 1
    assert restored[-1, pair.mask_position] == pytest.approx(1.0, abs=tol)
    assert restored[0, changed[0]] == pytest.approx(1.0, abs=tol)
    heads = head_scores(lm, pair, run)  # the batch grows at the patched layer: rows must not mix
    assert heads.shape == (lm.num_layers, lm.num_heads)
    assert np.allclose(heads, head_scores(lm, pair, run, batch_rows=1), rtol=0, atol=1e-6)
    run_itself = pair_scores(lm, itself)
    assert np.allclose(head_scores(lm, itself, run_itself), run_itself.clean_score, rtol=0, atol=1e-6)


def test_skipping_unchanged_sites_changes_no_score():
    lm = tiny_lm("bert")
    pair = encode_pair(lm, CLEAN, CORRUPTED, "is", "are")
    run = pair_scores(lm, pair)
    skipped = hidden_state_scores(lm, pair, run)
    every = hidden_state_scores(lm, pair, run, skip_unchanged=False, batch_rows=5)  # batches cut inside layers
    assert np.allclose(skipped, every, rtol=0, atol=1e-6)
    assert skipped[0, 0] == run.corrupted_score  # the [CLS] embedding is the same in both: not run


def test_the_metric_refuses_an_undefined_fraction():
    assert restored_fraction([2.0, 1.0, 1.5], clean=2.0, corrupted=1.0) == pytest.approx([1.0, 0.0, 0.5])
    for clean, corrupted in ((1.0, 1.0), (1.0, 1.0 + 1e-9), (float("nan"), 0.0)):
        with pytest.raises(PatchingError, match="no difference"):
            restored_fraction(0.5, clean, corrupted)
    lm = tiny_lm("bert")
    with pytest.raises(PatchingError, match="no difference"):
        patch_hidden_states(lm, CLEAN, CLEAN, "is", "are")


def test_bad_pairs_and_models_are_refused():
    lm = tiny_lm("bert")
    with pytest.raises(PatchingError, match="same token length"):
        encode_pair(lm, CLEAN, "the big dogs [MASK] here .", "is", "are")
    with pytest.raises(PatchingError, match="mask tokens"):
        encode_pair(lm, "the dog [MASK] [MASK] .", "the dogs [MASK] [MASK] .", "is", "are")
    with pytest.raises(PatchingError, match="one"):
        encode_pair(lm, CLEAN, CORRUPTED, "isnt", "are")
    with pytest.raises(PatchingError, match="position 9"):
        patch_heads(lm, CLEAN, CORRUPTED, "is", "are", position=9)
    base = from_modules("base", tiny_model("bert"), tiny_tokenizer("bert"))
    with pytest.raises(ModelError, match="mlm_head=True"):
        patch_hidden_states(base, CLEAN, CORRUPTED, "is", "are")
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=len(lm.tokenizer)))
    other = LoadedModel("gpt2", None, gpt2, lm.tokenizer, gpt2.config, "x", True)
    with pytest.raises(ModelError, match="gpt2"):
        patch_hidden_states(other, CLEAN, CORRUPTED, "is", "are")


@pytest.fixture(scope="module")
def english_tokenizer():
    """The shipped minilm-english-mlm's uncased WordPiece tokenizer (no weights loaded)."""
    from transformers import AutoTokenizer

    from bertology.models import resolve

    return AutoTokenizer.from_pretrained(resolve("minilm-english-mlm")[1])


def test_minimal_pairs_have_equal_lengths_single_token_words_and_roles(english_tokenizer):
    tok = english_tokenizer
    pairs = agreement_pairs(tok, 120, seed=3)
    assert len(pairs) == 120 and len({p.clean for p in pairs}) == 120
    assert {p.template for p in pairs} == {"pp", "object_rc", "subject_rc"}
    assert {p.condition for p in pairs} == {"match", "mismatch"}
    for p in pairs:
        a, b = tok(p.clean)["input_ids"], tok(p.corrupted)["input_ids"]
        assert len(a) == len(b) == len(p.roles)
        mask = a.index(tok.mask_token_id)
        assert b.index(tok.mask_token_id) == mask and p.roles[mask] == "verb"
        changed = [p.roles[i] for i, (x, y) in enumerate(zip(a, b)) if x != y]
        assert changed == ["subject"]  # flip="subject": only the subject's number differs
        for word in (p.target, p.foil, p.clean.split()[1], p.corrupted.split()[1]):
            assert len(tok(word, add_special_tokens=False)["input_ids"]) == 1
    assert [p.clean for p in agreement_pairs(tok, 10, seed=3)] == [p.clean for p in pairs[:10]]  # seeded


def test_minimal_pairs_flip_both_and_refuse_unknown_options(english_tokenizer):
    pairs = agreement_pairs(english_tokenizer, 12, flip="both", templates=["pp"], verbs=["is/are"])
    for p in pairs:
        roles = dict(zip(p.roles[1:-1], zip(p.clean.split(), p.corrupted.split())))
        assert roles["subject"][0] != roles["subject"][1] and roles["attractor"][0] != roles["attractor"][1]
        assert (p.target, p.foil) in (("is", "are"), ("are", "is"))
    with pytest.raises(ConfigError, match="templates"):
        agreement_pairs(english_tokenizer, 5, templates=["cleft"])
    with pytest.raises(ConfigError, match="flip"):
        agreement_pairs(english_tokenizer, 5, flip="attractor")


@pytest.fixture(scope="module")
def tiny_english_dir(tmp_path_factory, english_tokenizer):
    """A tiny random BERT with an MLM head and the English tokenizer, saved as a model folder."""
    from bertology.testing import make_tiny_bert

    path = tmp_path_factory.mktemp("tiny_english_mlm")
    make_tiny_bert(english_tokenizer, mlm=True, seed=1).save_pretrained(path)
    english_tokenizer.save_pretrained(path)
    return path


def test_the_study_writes_means_with_intervals(tiny_english_dir, tmp_path):
    from bertology.results import read_table
    from bertology.studies import run_study

    overrides = {"model": str(tiny_english_dir), "pairs": 8, "min_difference": 1e-9, "use_pairs": "all"}
    run = run_study("patching", overrides=overrides, results_root=tmp_path, log=lambda m: None)
    pairs = read_table(run, "pairs")
    used = pairs[pairs["used"]]
    assert len(pairs) == 8 and len(used) >= 2
    assert (used["clean_score"] > used["corrupted_score"]).all()  # only pairs the score moves the right way
    accuracy = read_table(run, "accuracy").set_index("template")
    assert accuracy.loc["all", "clean_accuracy"] == pytest.approx(pairs["clean_correct"].mean())
    positions = read_table(run, "position_effects")
    every = positions[positions["template"] == "all"]
    assert set(every["role"]) >= {"CLS", "subject", "verb", "SEP"}
    shared = every[every["role"].isin(["CLS", "det", "subject", "attractor", "verb", "SEP"])]  # in every template
    assert (shared["n_pairs"] == len(used)).all()
    verb_last = every[(every["role"] == "verb") & (every["layer"] == every["layer"].max())]
    assert verb_last["restored"].iloc[0] == pytest.approx(1.0, abs=1e-3)  # last layer at the mask: the identity
    heads = read_table(run, "head_effects")
    assert (
        len(heads) == 2 * 4 and (heads["low"] <= heads["restored"]).all() and (heads["restored"] <= heads["high"]).all()
    )
    raw = read_table(run, "pair_heads")
    mean = raw[(raw["layer"] == 1) & (raw["head"] == 2)]["restored"].mean()
    assert heads.set_index(["layer", "head"]).loc[(1, 2), "restored"] == pytest.approx(mean)
    assert not (run / "number_carriers.parquet").exists()  # a random model: its accuracy reaches chance
    carriers = __import__("bertology.probes.patching.analysis", fromlist=["_carriers"])._carriers(positions, heads)
    assert set(carriers["kind"]) <= {"hidden state", "head"} and (carriers["low"] > 0.1).all()


def test_cli_patches_one_pair_and_refuses_half_a_pair(tiny_english_dir):
    from typer.testing import CliRunner

    from bertology.cli import app

    runner = CliRunner()
    args = ["patch", "--model", str(tiny_english_dir), "--clean", "the key to the cabinets [MASK] here ."]
    result = runner.invoke(app, [*args, "--corrupted", "the keys to the cabinets [MASK] here .", "--target", "is"])
    assert result.exit_code != 0 and "--foil" in str(result.exception)
    result = runner.invoke(
        app,
        [
            *args,
            "--corrupted",
            "the keys to the cabinets [MASK] here .",
            "--target",
            "is",
            "--foil",
            "are",
            "--top",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "hidden states" in result.output and "patched at every position" in result.output
    assert "[MASK]" in result.output  # the last layer at the mask restores everything: it is in the top rows


def test_dashboard_figures_show_intervals_on_hover():
    from bertology.apps.pages.patching import head_heatmap, position_heatmap

    positions = pd.DataFrame(
        {
            "template": "all",
            "layer": [0, 0, 1, 1],
            "role": ["subject", "verb", "subject", "verb"],
            "role_order": [2, 8, 2, 8],
            "restored": [1.0, 0.0, 0.25, 0.75],
            "low": [0.9, -0.1, 0.1, 0.6],
            "high": [1.1, 0.1, 0.4, 0.9],
            "n_pairs": 10,
        }
    )
    fig = position_heatmap(positions, "all")
    heat = fig.data[0]
    assert list(heat.x) == ["subject", "verb"] and list(heat.y) == [0, 1]
    assert np.allclose(np.asarray(heat.z, dtype=float), [[1.0, 0.0], [0.25, 0.75]])
    assert "[0.60, 0.90]" in heat.text[1][1]
    heads = pd.DataFrame(
        {
            "layer": [0, 0, 1, 1],
            "head": [0, 1, 0, 1],
            "restored": [0.5, 0.0, 0.0, 0.2],
            "low": 0.0,
            "high": 0.6,
            "n_pairs": 10,
        }
    )
    heat = head_heatmap(heads).data[0]
    assert np.allclose(np.asarray(heat.z, dtype=float), [[0.5, 0.0], [0.0, 0.2]]) and "[0.00, 0.60]" in heat.text[0][0]


@pytest.mark.gpu
def test_patching_on_the_gpu_equals_the_cpu(cuda):
    lm = tiny_lm("bert")
    on_cpu = patch_hidden_states(lm, CLEAN, CORRUPTED, "is", "are")
    lm.model.to(cuda)
    on_gpu = patch_hidden_states(lm, CLEAN, CORRUPTED, "is", "are")
    heads = patch_heads(lm, CLEAN, CORRUPTED, "is", "are")
    assert np.allclose(on_gpu["score"], on_cpu["score"], atol=1e-4) and heads["restored"].notna().all()


@pytest.mark.slow
def test_the_shipped_model_restores_at_the_subject_and_the_mask():
    from bertology.models import load_model

    lm = load_model("minilm-english-mlm", mlm_head=True, attentions=False)
    clean, corrupted = "The key to the cabinets [MASK] here .", "The keys to the cabinets [MASK] here ."
    states = patch_hidden_states(lm, clean, corrupted, "is", "are").set_index(["layer", "position"])
    tol = float_tolerance(states["clean_score"].iloc[0], states["corrupted_score"].iloc[0])
    assert states.loc[(0, 2), "restored"] == pytest.approx(1.0, abs=tol)  # the embeddings at "key"
    assert states.loc[(6, 6), "restored"] == pytest.approx(1.0, abs=tol)  # the last layer at [MASK]
    assert states.loc[(0, 4), "restored"] == pytest.approx(0.0, abs=tol)  # an embedding the pair shares


def test_the_page_shows_the_planted_head_with_its_interval(tmp_path, monkeypatch):
    from dashboard_planted import PLANTED_PATCH_HEAD, chart_specs, patching_run
    from streamlit.testing.v1 import AppTest

    from bertology.apps.dashboard import __file__ as dashboard_file

    root = tmp_path / "results"
    patching_run(root)
    monkeypatch.setenv("BERTOLOGY_RESULTS", str(root))
    at = AppTest.from_file(dashboard_file, default_timeout=60)
    at.run()
    at.sidebar.radio(key="page").set_value("Patching").run()
    assert not at.exception and not at.error and not at.warning
    specs = chart_specs(at)
    assert len(specs) == 2
    positions, heads = (spec["data"][0] for spec in specs)
    assert positions["x"] == ["CLS", "subject", "verb", "SEP"] and positions["z"][0][1] == pytest.approx(1.0)
    layer, head = PLANTED_PATCH_HEAD  # numbers, from 1: row layer - 1, column head - 1 of the grid
    assert heads["y"] == [1, 2] and heads["x"] == [1, 2, 3]  # the axes label layers and heads from 1
    assert heads["z"][layer - 1][head - 1] == pytest.approx(0.8)
    assert f"layer {layer}, head {head}<br>restored 0.800 [0.70, 0.90]" in heads["text"][layer - 1][head - 1]


# --------------------------------------------------------------------------- issue 54 items 7-8, issue 55 items 4-5


def test_noising_the_planted_head_destroys_the_whole_difference_and_no_other_head_any(planted):
    heads = patch_heads(planted, CLEAN, CORRUPTED, "is", "are", direction="noising").set_index(["layer", "head"])
    first = heads.iloc[0]
    tol = float_tolerance(first["clean_score"], first["corrupted_score"])
    assert (heads["direction"] == "noising").all()
    assert heads.loc[NAMED, "restored"] == pytest.approx(1.0, abs=tol)
    others = heads.drop(index=NAMED)
    assert np.allclose(others["restored"], 0.0, atol=tol)
    # the reported scores are the original pair's, whatever the direction
    denoised = patch_heads(planted, CLEAN, CORRUPTED, "is", "are")
    assert first["clean_score"] == pytest.approx(denoised["clean_score"].iloc[0])
    states = patch_hidden_states(planted, CLEAN, CORRUPTED, "is", "are", direction="noising")
    last = states[(states["layer"] == states["layer"].max()) & (states["position"] == MASK)]
    assert last["restored"].iloc[0] == pytest.approx(1.0, abs=tol)  # the last state at the mask: all destroyed
    assert last["token"].iloc[0] == "[MASK]" and states["token"].iloc[SUBJECT] == "dog"  # the clean sentence's tokens
    with pytest.raises(PatchingError, match="direction"):
        patch_heads(planted, CLEAN, CORRUPTED, "is", "are", direction="sideways")


def test_unknown_words_and_over_long_pairs_are_refused():
    lm = tiny_lm("bert")
    with pytest.raises(PatchingError, match=r"target '☃' is the special token \[UNK\]"):
        encode_pair(lm, CLEAN, CORRUPTED, "☃", "are")
    with pytest.raises(PatchingError, match=r"foil .* special token"):
        encode_pair(lm, CLEAN, CORRUPTED, "is", "[SEP]")
    limit = lm.model.config.max_position_embeddings
    long_clean, long_corrupted = ("the dog " * limit) + CLEAN, ("the dog " * limit) + CORRUPTED
    with pytest.raises(PatchingError, match=f"clean sentence has {2 * limit + 7} tokens; .* at most {limit}"):
        encode_pair(lm, long_clean, long_corrupted, "is", "are")


def test_minimal_pairs_never_use_a_word_the_vocabulary_lacks(english_tokenizer):
    unk = english_tokenizer.unk_token_id
    for pair in agreement_pairs(english_tokenizer, 30, seed=3):
        for text in (pair.clean, pair.corrupted):
            assert unk not in english_tokenizer(text.replace("[MASK]", english_tokenizer.mask_token))["input_ids"]


def test_a_random_model_gets_a_warning_a_control_and_no_number_carriers(tiny_english_dir, tmp_path):
    """The planted answer: a randomly initialised BERT cannot do agreement. The study says so (its
    clean accuracy's interval reaches chance), scores a random-init control, keeps only the pairs it
    gets right in both sentences by default, and names no site as carrying number -- in the study,
    the CLI summary and on the page."""
    from cli_inprocess import run_cli

    from bertology.probes.patching.analysis import able
    from bertology.results import read_manifest, read_table

    root = tmp_path / "results"
    result = run_cli("patch", "--model", str(tiny_english_dir), "--pairs", "12", "--out", str(root), "--top", "3")
    assert result.returncode == 0, result.stderr
    run = next((root / "patching").iterdir())
    pairs, accuracy = read_table(run, "pairs"), read_table(run, "accuracy")
    both = pairs["clean_correct"] & pairs["corrupted_correct"]
    assert list(pairs["used"]) == list(both & (pairs["clean_score"] - pairs["corrupted_score"] >= 0.1))
    every = accuracy.set_index("template").loc["all"]
    assert every["n_used"] == pairs["used"].sum() and not every["above_chance"] and every["clean_low"] <= 0.5
    assert read_manifest(run)["above_chance"] is False and not able(accuracy)[0]
    assert not (run / "number_carriers.parquet").exists()
    control = read_table(run, "control_accuracy").set_index("template")
    assert control.loc["all", "n_pairs"] == 12 and not control.loc["all", "above_chance"]
    assert "warning: the model is not shown to do the task" in result.stdout
    assert "clean accuracy" in result.stdout and "randomly initialised copy" in result.stdout
    assert "carries" not in result.stdout
    # the page: the warning, the accuracy with its interval, no "where number is carried" section
    from streamlit.testing.v1 import AppTest

    from bertology.apps.dashboard import __file__ as dashboard_file

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BERTOLOGY_RESULTS", str(root))
        at = AppTest.from_file(dashboard_file, default_timeout=60)
        at.run()
        at.sidebar.radio(key="page").set_value("Patching").run()
    assert not at.exception
    assert any("not shown to do this task" in w.value for w in at.warning)
    assert not any("Where number is carried" in h.value for h in at.subheader)
    assert any("denoising" in m.value for m in at.markdown)


def test_noising_runs_as_a_study_and_says_so(tiny_english_dir, tmp_path):
    from bertology.results import read_table
    from bertology.studies import run_study

    overrides = {
        "model": str(tiny_english_dir),
        "pairs": 6,
        "min_difference": 1e-9,
        "use_pairs": "all",
        "direction": "noising",
        "random_init_control": False,
    }
    run = run_study("patching", overrides=overrides, results_root=tmp_path, log=lambda m: None)
    raw = read_table(run, "pair_positions")
    last = raw[(raw["role"] == "verb") & (raw["layer"] == raw["layer"].max())]
    assert np.allclose(last["restored"], 1.0, atol=1e-3)  # the corrupted last state at the mask destroys it all
    assert np.allclose(raw["base_score"], raw["clean_score"]) and np.allclose(
        raw["source_score"], raw["corrupted_score"]
    )
    assert not (run / "control_accuracy.parquet").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pairs", "0"], "--pairs must be at least 2"),
        (["--position", "3"], "--position patches one pair"),
        (["--direction", "backwards"], "--direction must be one of denoising, noising"),
        (["--top", "-5"], "'--top': Input should be greater than or equal to 1"),
    ],
)
def test_cli_refuses_what_it_would_silently_ignore(tiny_english_dir, tmp_path, args, message):
    from cli_inprocess import run_cli

    result = run_cli("patch", "--model", str(tiny_english_dir), "--out", str(tmp_path), *args)
    assert result.returncode == 2 and message in result.stderr, result
    assert not (tmp_path / "patching").exists()


def test_cli_refuses_an_over_long_pair_and_an_unknown_target_in_one_line(tiny_english_dir):
    from cli_inprocess import run_cli

    pair = ["--clean", "the key " * 300 + "[MASK] here .", "--corrupted", "the keys " * 300 + "[MASK] here ."]
    result = run_cli("patch", "--model", str(tiny_english_dir), *pair, "--target", "is", "--foil", "are")
    assert result.returncode == 2 and "reads at most" in result.stderr and "Traceback" not in result.stderr
    assert len([line for line in result.stderr.splitlines() if "error" in line.lower()]) == 1
    pair = ["--clean", "the key [MASK] here .", "--corrupted", "the keys [MASK] here ."]
    result = run_cli("patch", "--model", str(tiny_english_dir), *pair, "--target", "☃", "--foil", "are")
    assert result.returncode == 2 and "[UNK]" in result.stderr


# --------------------------------------------------------------------------- issue 54: the random-init control's maps


def test_the_control_is_patched_and_mapped_like_the_model(tiny_english_dir, tmp_path):
    """The random-init control goes through the same patching: its pairs are those whose score it moves
    toward the right verb (``use_pairs: all``), and its maps hold the same identity as any model's (the
    last hidden state at the mask restores everything), so they are real patching results."""
    from bertology.results import read_manifest, read_table
    from bertology.studies import run_study

    overrides = {"model": str(tiny_english_dir), "pairs": 8, "min_difference": 1e-9}
    run = run_study("patching", overrides=overrides, results_root=tmp_path, log=lambda m: None)
    control = read_table(run, "control_pairs")
    moved = control["clean_score"] - control["corrupted_score"] >= 1e-9
    assert len(control) == 8 and list(control["used"]) == list(moved) and moved.sum() >= 2
    assert read_table(run, "control_accuracy").set_index("template").loc["all", "n_used"] == moved.sum()
    assert read_manifest(run)["control_selection"] == "all"
    positions = read_table(run, "control_position_effects")
    every = positions[positions["template"] == "all"]
    last = every[(every["role"] == "verb") & (every["layer"] == every["layer"].max())]
    assert last["restored"].iloc[0] == pytest.approx(1.0, abs=1e-3) and (every["n_pairs"] <= moved.sum()).all()
    heads = read_table(run, "control_head_effects")
    assert len(heads) == 2 * 4 and (heads["n_pairs"] == moved.sum()).all()
    raw = read_table(run, "control_pair_heads")
    assert heads.set_index(["layer", "head"]).loc[(1, 2), "restored"] == pytest.approx(
        raw[(raw["layer"] == 1) & (raw["head"] == 2)]["restored"].mean()
    )
    # the control's weights differ from the model's: its scores are not the model's
    assert not np.allclose(control["clean_score"], read_table(run, "pairs")["clean_score"])


def test_the_page_draws_the_control_maps_under_the_model_on_one_colour_scale(tmp_path, monkeypatch):
    from dashboard_planted import PLANTED_CONTROL_HEAD, chart_specs, patching_run
    from streamlit.testing.v1 import AppTest

    from bertology.apps.dashboard import __file__ as dashboard_file

    root = tmp_path / "results"
    patching_run(root, control=True)
    monkeypatch.setenv("BERTOLOGY_RESULTS", str(root))
    at = AppTest.from_file(dashboard_file, default_timeout=60)
    at.run()
    at.sidebar.radio(key="page").set_value("Patching").run()
    assert not at.exception and not at.error
    specs = chart_specs(at)
    assert len(specs) == 4  # the model's two maps, then the control's two
    titles = [spec["layout"]["title"]["text"] for spec in specs]
    assert not any("CONTROL" in t for t in titles[:2]) and all(t.startswith("CONTROL (random-init") for t in titles[2:])
    scales = {(spec["data"][0]["zmin"], spec["data"][0]["zmax"]) for spec in specs}
    assert scales == {(-1.0, 1.0)}  # the model's largest |restored| is 1.0: one scale for all four
    layer, head = PLANTED_CONTROL_HEAD  # numbers, from 1: grid row layer - 1, column head - 1
    control_heads = specs[3]["data"][0]
    assert control_heads["z"][layer - 1][head - 1] == pytest.approx(3.0)  # beyond the scale: clipped, exact on hover
    assert f"layer {layer}, head {head}<br>restored 3.000" in control_heads["text"][layer - 1][head - 1]
    assert any("Control: randomly initialised model" in h.value for h in at.subheader)


def test_colour_limit_is_the_largest_mean_and_at_least_one():
    from bertology.apps.pages.patching import colour_limit, head_heatmap, position_heatmap

    heads = pd.DataFrame(
        {"layer": [0, 0], "head": [0, 1], "restored": [-2.5, 0.3], "low": 0.0, "high": 1.0, "n_pairs": 3}
    )
    assert colour_limit(heads) == 2.5 and colour_limit(heads.assign(restored=[0.1, np.nan])) == 1.0
    assert colour_limit(None) == 1.0
    fig = head_heatmap(heads, 2.5, control=True)
    assert (fig.data[0].zmin, fig.data[0].zmax) == (-2.5, 2.5)
    assert fig.layout.title.text.startswith("CONTROL (random-init model):<br>head output")  # its own line
    positions = heads.rename(columns={"head": "role_order"}).assign(template="<b>x</b>", role=["subject", "verb"])
    assert "(&lt;b&gt;x&lt;/b&gt;)" in position_heatmap(positions, "<b>x</b>").layout.title.text  # data escaped
