"""Attribution of one prediction (bertology.attribution, the ``attribute`` command): integrated
gradients are complete within the quadrature error their number of steps allows, gradient × input
is the autograd product, planted models put all the attribution on the one token their output
reads, pieces add up to words, and bad input is refused with a clear message. Tiny in-process
models; the shipped model only under ``slow``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import BertForSequenceClassification, BertForTokenClassification
from typer.testing import CliRunner

from bertology.attribution import attribute, classifier_attribution, masked_word_attribution
from bertology.cli import app
from bertology.errors import ConfigError, CorpusError, ModelError
from bertology.inspection import attention_rollout, masked_predictions
from bertology.models import from_modules
from bertology.testing import tiny_model, tiny_tokenizer

WORDS = "the old dog said zebra .".split()  # "zebra" is 5 pieces of the tiny WordPiece vocabulary
LABELS = ["NOUN", "VERB", "OTHER"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread is faster on a busy machine


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer("bert")


@pytest.fixture(scope="module")
def mlm64(tok):
    """A tiny MLM in float64 (so quadrature error is not hidden under rounding), its weights drawn
    10x wider than BERT's init so that its output moves between input and baseline."""
    return from_modules("tiny-mlm", tiny_model("bert", mlm=True, initializer_range=0.2).double(), tok)


def classifier(tok, kind: str, seed: int = 0):
    config = tiny_model("bert").config
    labels = {"id2label": dict(enumerate(LABELS)), "label2id": {l: i for i, l in enumerate(LABELS)}}
    config.update({"num_labels": 3, "initializer_range": 0.2, **labels})  # wide init: outputs that move
    torch.manual_seed(seed)
    cls = BertForSequenceClassification if kind == "sequence" else BertForTokenClassification
    return cls(config).eval()


def mlm_score(model, ids, position: int, target: int, embeddings: torch.Tensor) -> torch.Tensor:
    """``log p(target)`` at ``position`` for word-piece embeddings ``[B, T, E]`` (the path of the
    integrated gradients), written out here without the module's code."""
    logits = model(inputs_embeds=embeddings, token_type_ids=torch.zeros_like(ids).expand(len(embeddings), -1)).logits
    return torch.log_softmax(logits[:, position], dim=-1)[:, target]


# --------------------------------------------------------------------------- integrated gradients


def path_values(lm, a, points: int = 401) -> np.ndarray:
    """``g(α) = f(e' + α (e − e'))`` at ``points`` evenly spaced α in [0, 1] (``e``, ``e'``: the
    word-piece embeddings of the input and of the baseline)."""
    model = lm.model
    ids, base = torch.tensor([a.input_ids]), torch.tensor([a.baseline_ids])
    with torch.no_grad():
        e, e0 = model.get_input_embeddings()(ids), model.get_input_embeddings()(base)
        alpha = torch.linspace(0, 1, points, dtype=torch.float64)[:, None, None]
        return mlm_score(model, ids, a.position, a.target_id, e0 + alpha * (e - e0)).numpy()


def test_integrated_gradients_are_complete_within_the_midpoint_rule_error(mlm64):
    n = 16
    a = masked_word_attribution(mlm64, WORDS, 2, "cat", methods="ig", n_steps=n, ig_rule="riemann_middle")
    total = a.token_scores["score"].sum()
    g = path_values(mlm64, a)
    assert g[-1] == pytest.approx(a.score, abs=1e-12) and g[0] == pytest.approx(a.baseline_score, abs=1e-12)
    assert abs(a.difference) > 0.05  # the output really moves along the path
    # IG = ∫₀¹ g'(α) dα by the midpoint rule with n points: |error| <= max|g'''| / (24 n²). g''' is
    # estimated by third differences on 401 points (float64: rounding there is ~1e-8 of g'''), x2
    # for the grid missing the maximum.
    third = np.abs(np.diff(g, 3)).max() * 400**3
    bound = 2 * third / (24 * n**2)
    assert abs(total - a.difference) <= bound, (total, a.difference, bound)
    assert a.delta == pytest.approx(total - a.difference, abs=1e-12)  # Captum's delta is this error
    # the midpoint error falls as 1/n²: 4x the steps, ~1/16 of the error (1/8 allowed)
    finer = masked_word_attribution(mlm64, WORDS, 2, "cat", methods="ig", n_steps=4 * n, ig_rule="riemann_middle")
    assert abs(finer.delta) <= abs(a.delta) / 8
    # the default rule (Gauss-Legendre, 50 points) is exact to far below the midpoint bound there
    default = masked_word_attribution(mlm64, WORDS, 2, "cat", methods="ig")
    assert abs(default.delta) <= 2 * third / (24 * 50**2) and abs(default.delta) < 1e-8


def test_float32_completeness_and_the_masked_word_gets_no_integrated_gradient(tok):
    lm = from_modules("tiny-mlm", tiny_model("bert", mlm=True, initializer_range=0.2), tok)
    a = masked_word_attribution(lm, WORDS, 2, methods=["ig"])
    # float32: the sum over T x 32 products of 50-point averages is exact to ~1e-6 of its size
    assert abs(a.delta) <= 1e-4 * max(1.0, abs(a.difference))
    ig = a.token_scores.set_index("token_position")["score"]
    kept = [t for t, (i, j) in enumerate(zip(a.input_ids, a.baseline_ids)) if i == j]
    assert kept == [0, a.position, len(a.input_ids) - 1]  # [CLS], the mask and [SEP] stay in the baseline
    assert (ig[kept] == 0).all()  # a token equal to its baseline gets nothing
    assert a.table.query("method == 'ig' and target")["score"].item() == 0


@pytest.mark.parametrize("model_type", ["roberta", "xlm-roberta", "camembert", "mpnet"])
def test_completeness_where_positions_depend_on_the_ids(model_type):
    """The RoBERTa family computes positions from the input ids (a [PAD] gets ``padding_idx``): the
    baseline's score must be the path's end at the sentence's own positions, so the integrated
    gradients sum to the reported difference (a delta of ~0, not the gap between two functions)."""
    tok = tiny_tokenizer(model_type)
    lm = from_modules(model_type, tiny_model(model_type, mlm=True, initializer_range=0.2).double(), tok)
    a = masked_word_attribution(lm, WORDS, 2, methods="ig")
    assert a.baseline_ids != a.input_ids and tok.pad_token_id in a.baseline_ids
    model = lm.model
    ids, base = torch.tensor([a.input_ids]), torch.tensor([a.baseline_ids])
    with torch.no_grad():  # the path's two ends, written out: embeddings in, positions from the sentence
        e, e0 = model.get_input_embeddings()(ids), model.get_input_embeddings()(base)
        ends = [torch.log_softmax(model(inputs_embeds=x).logits[0, a.position], -1)[a.target_id] for x in (e0, e)]
    assert a.baseline_score == pytest.approx(float(ends[0]), abs=1e-10)
    assert a.score == pytest.approx(float(ends[1]), abs=1e-10)
    assert abs(a.difference) > 0.01  # the output moves along the path
    total = a.token_scores["score"].sum()
    assert total == pytest.approx(a.difference, abs=1e-8) and abs(a.delta) < 1e-8


# --------------------------------------------------------------------------- gradient x input


def test_gradient_x_input_equals_the_autograd_product(mlm64):
    a = masked_word_attribution(mlm64, WORDS, 2, "cat", methods="gxi")
    model = mlm64.model
    ids = torch.tensor([a.input_ids])
    e = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(mlm_score(model, ids, a.position, a.target_id, e).sum(), e)
    expected = (grad * e).sum(-1)[0].detach().numpy()
    np.testing.assert_allclose(a.token_scores["score"].to_numpy(), expected, rtol=1e-10, atol=1e-14)
    assert np.abs(expected).max() > 1e-3  # not a comparison of zeros


def test_default_target_is_the_top_guess_and_attention_rows_are_the_models(tok):
    lm = from_modules("tiny-mlm", tiny_model("bert", mlm=True), tok)
    a = masked_word_attribution(lm, WORDS, 1, methods=["attention", "rollout"])
    assert a.target == masked_predictions(lm, WORDS, 1, k=1)["token"].iloc[0]
    with torch.no_grad():
        maps = lm.model(input_ids=torch.tensor([a.input_ids]), output_attentions=True).attentions
    attentions = torch.stack([m[0] for m in maps]).numpy()  # [L, H, T, T]
    scores = a.token_scores.pivot(index="token_position", columns="method", values="score")
    np.testing.assert_allclose(scores["attention"], attentions[-1].mean(0)[a.position], atol=1e-6)
    np.testing.assert_allclose(scores["rollout"], attention_rollout(attentions)[-1][a.position], atol=1e-6)


# --------------------------------------------------------------------------- planted models


def test_a_token_classifier_that_reads_only_its_own_token_credits_only_that_word(tok):
    model = classifier(tok, "token")
    with torch.no_grad():  # attention adds nothing: each output depends on its own token only
        for layer in model.bert.encoder.layer:
            layer.attention.output.dense.weight.zero_()
            layer.attention.output.dense.bias.zero_()
    lm = from_modules("planted-token", model, tok)
    a = classifier_attribution(lm, WORDS, "VERB", word=1)
    assert a.position == 2 and a.target == "VERB"  # "old" is token 2, after [CLS]
    # attention is not explanation: the maps still spread over the sentence the output ignores
    assert a.table.query("method == 'attention'").set_index("position")["normalised"][1] < 0.5
    for method, rows in a.table[a.table["method"].isin(["gxi", "ig"])].groupby("method"):
        scores = rows.set_index("position")["score"]
        assert abs(scores[1]) > 1e-3 and np.abs(scores.drop(1)).max() == 0, (method, scores)
        assert rows.set_index("position")["normalised"][1] == pytest.approx(np.sign(scores[1]))
    assert a.table.query("method == 'ig'")["score"].sum() == pytest.approx(a.difference, abs=1e-5)


def test_a_sequence_classifier_that_sees_one_word_credits_that_word(tok):
    model = classifier(tok, "sequence")
    dog = tok.convert_tokens_to_ids("dog")
    with torch.no_grad():  # every word-piece embedding zero but "dog"'s: only "dog" carries input
        keep = model.bert.embeddings.word_embeddings.weight[dog].clone()
        model.bert.embeddings.word_embeddings.weight.zero_()
        model.bert.embeddings.word_embeddings.weight[dog] = 10 * keep
    lm = from_modules("planted-sequence", model, tok)
    a = attribute(lm, WORDS, methods=["gxi", "ig"], output="log-probability")
    assert a.kind == "sequence" and a.position == 0
    for method, rows in a.table.groupby("method"):
        scores = rows.set_index("position")["score"]
        assert scores.abs().idxmax() == 2 and np.abs(scores.drop(2)).max() == 0, (method, scores)
    assert abs(a.difference) > 1e-3
    assert a.table.query("method == 'ig'")["score"].sum() == pytest.approx(a.difference, abs=1e-5)


# --------------------------------------------------------------------------- words and errors


def test_pieces_are_summed_into_words(tok):
    lm = from_modules("tiny-mlm", tiny_model("bert", mlm=True), tok)
    a = masked_word_attribution(lm, WORDS, 1)
    assert a.tokens[5:10] == ["z", "##e", "##b", "##r", "##a"]
    for method in ("gxi", "ig", "attention", "rollout"):
        tokens = a.token_scores[a.token_scores["method"] == method]
        words = a.table[a.table["method"] == method].set_index("position")
        assert words.loc[4, "pieces"] == 5 and list(words["word"]) == WORDS
        assert words.loc[4, "score"] == pytest.approx(tokens.query("word == 4")["score"].sum(), abs=1e-12)
        assert words["score"].sum() == pytest.approx(tokens.query("word >= 0")["score"].sum(), abs=1e-12)
        assert np.abs(words["normalised"].drop(index=1)).sum() == pytest.approx(1.0)  # the masked word is apart
        assert np.isnan(words.loc[1, "normalised"])
    assert list(a.by_word().columns) == ["gxi", "ig", "attention", "rollout"] and len(a.by_word()) == len(WORDS) - 1


def test_bad_input_is_refused_with_the_reason(tok):
    mlm = from_modules("tiny-mlm", tiny_model("bert", mlm=True), tok)
    encoder = from_modules("tiny-encoder", tiny_model("bert"), tok)
    sequence = from_modules("tiny-seq", classifier(tok, "sequence"), tok)
    token = from_modules("tiny-tok", classifier(tok, "token"), tok)
    cases = [
        (lambda: masked_word_attribution(mlm, [], 0), CorpusError, "empty"),
        (lambda: masked_word_attribution(mlm, WORDS, 6), CorpusError, "outside the sentence of 6 words"),
        (lambda: masked_word_attribution(encoder, WORDS, 1), ModelError, "no MLM head"),
        (lambda: attribute(encoder, WORDS, 1), ModelError, "no head to explain"),
        (lambda: masked_word_attribution(mlm, WORDS, 1, "zebra"), CorpusError, "not one piece"),
        (lambda: masked_word_attribution(mlm, WORDS, 1, methods="lime"), ConfigError, "methods must be"),
        (lambda: masked_word_attribution(mlm, WORDS, 1, n_steps=1), ConfigError, "n_steps"),
        (lambda: classifier_attribution(sequence, WORDS, "ADJ"), ConfigError, "NOUN, VERB, OTHER"),
        (lambda: classifier_attribution(token, WORDS), CorpusError, "word index is needed"),
        (lambda: classifier_attribution(mlm, WORDS), ModelError, "not a fine-tuned classifier"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()
    sequence.model.set_attn_implementation("sdpa")
    with pytest.raises(ModelError, match="eager attention"):
        classifier_attribution(sequence, WORDS, methods="attention")
    assert classifier_attribution(sequence, WORDS, methods="gxi").table["method"].unique().tolist() == ["gxi"]


def test_the_masked_word_is_shown_apart_and_outputs_and_special_targets_are_checked(tok):
    """The masked word is not in the input: its row (the mask token's scores) is kept apart, out of
    the shares of the words the model did read; an MLM's output is log p(target) only; a special
    token is no target."""
    lm = from_modules("tiny-mlm", tiny_model("bert", mlm=True, initializer_range=0.2), tok)
    a = masked_word_attribution(lm, WORDS, 2, "cat", methods=["gxi"])
    rows = a.table.set_index("position")
    assert np.isnan(rows.loc[2, "normalised"]) and rows.loc[2, "score"] != 0  # the mask token's own gradient x input
    read = rows.drop(index=2)
    assert read["normalised"].abs().sum() == pytest.approx(1.0)
    assert read["normalised"].to_numpy() == pytest.approx((read["score"] / read["score"].abs().sum()).to_numpy())
    assert 2 not in a.by_word().index.get_level_values("position") and 2 in a.by_word(
        masked=True
    ).index.get_level_values("position")
    assert "word 2 ('dog') is the masked position" in a.masked_line() and "[MASK]" in a.masked_line()
    for output in ("probability", "logit"):
        with pytest.raises(ConfigError, match="log-probability"):
            attribute(lm, WORDS, 2, "cat", output=output)
    assert attribute(lm, WORDS, 2, "cat", output="log-probability", methods=["gxi"]).output == "log-probability"
    for special in ("[SEP]", "[CLS]", "[PAD]", "[MASK]"):
        with pytest.raises(CorpusError, match="special token"):
            masked_word_attribution(lm, WORDS, 2, special, methods=["gxi"])
    token = from_modules("tiny-tok", classifier(tok, "token"), tok)  # a token classifier reads its word: no NaN
    assert classifier_attribution(token, WORDS, word=1, methods=["gxi"]).table["normalised"].notna().all()


# --------------------------------------------------------------------------- the command


def test_the_attribute_command_prints_the_word_table(tmp_path, tok):
    from bertology.testing import save_tiny_model_dir

    mlm_dir = save_tiny_model_dir("bert", tmp_path / "mlm", mlm=True)
    result = CliRunner().invoke(
        app, ["attribute", "--model", str(mlm_dir), "--sentence", "the old dog said zebra.", "--word", "2"]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(l for l in lines if l.split()[:2] == ["position", "word"])
    assert header.split()[2:] == ["gxi", "ig", "attention", "rollout"]
    assert "log-probability of" in result.output and "zebra" in result.output
    assert "word 2 ('dog') is the masked position" in result.output  # shown apart, not as a row
    assert not any(l.split()[:2] == ["2", "dog"] for l in lines)
    args = ["attribute", "--model", str(mlm_dir), "--sentence", "the old dog said zebra.", "--word", "2"]
    contrast = CliRunner().invoke(app, [*args, "--target", "cat", "--foil", "dog", "--method", "gxi"])
    assert contrast.exit_code == 0 and "log-probability contrast of 'cat rather than dog'" in contrast.output
    refused = CliRunner().invoke(app, [*args, "--output", "probability"])
    assert refused.exit_code != 0 and "log-probability" in str(refused.exception)
    seq_dir = tmp_path / "seq"
    classifier(tok, "sequence").save_pretrained(seq_dir)
    tok.save_pretrained(seq_dir)
    out = CliRunner().invoke(  # no bar: CliRunner mixes standard error into the output read here
        app,
        ["attribute", "--model", str(seq_dir), "--sentence", "the dog", "--method", "ig"],
        env={"BERTOLOGY_PROGRESS": "0"},
    )
    assert out.exit_code == 0, out.output
    assert "logit of" in out.output and out.output.splitlines()[1].split() == ["position", "word", "ig"]


def test_the_attribute_command_explains_a_fine_tuned_token_classifier_by_its_registry_name(tmp_path):
    from bertology import paths
    from bertology.finetuning.config import FinetuneConfig
    from bertology.finetuning.trainer import run_finetuning
    from bertology.testing import save_tiny_model_dir, write_planted_token_task

    config = FinetuneConfig(
        run_name="ft-tok",
        model=str(save_tiny_model_dir("bert", tmp_path / "tiny-bert")),
        task=str(write_planted_token_task(tmp_path / "token.jsonl")),
        batch_size=16,
        max_steps=20,
        learning_rate=1e-3,
        warmup_fraction=0.0,
        output_root=str(paths.models_dir()),  # the registry's folder (BERTOLOGY_HOME is a temporary one)
        progress=False,
    )
    run_finetuning(config)
    args = ["attribute", "--model", "ft-tok", "--sentence", "the old dog said that .", "--word", "2"]
    out = CliRunner().invoke(
        app, [*args, "--target", "B", "--output", "log-probability"], env={"BERTOLOGY_PROGRESS": "0"}
    )
    assert out.exit_code == 0, out.output
    assert out.output.startswith("ft-tok@20: log-probability of 'B' at word 2 ('dog')")
    bad = CliRunner().invoke(app, [*args, "--target", "C"])
    assert "'C' is not a class of ft-tok@20: its labels are A, B" in str(bad.exception)


# --------------------------------------------------------------------------- devices and the real model


@pytest.mark.gpu
def test_attribution_on_cuda_equals_the_cpu(tok, cuda):
    cpu = from_modules("tiny-mlm", tiny_model("bert", mlm=True, initializer_range=0.2), tok)
    on_cpu = masked_word_attribution(cpu, WORDS, 2, "cat")
    gpu = from_modules("tiny-mlm", tiny_model("bert", mlm=True, initializer_range=0.2).to(cuda), tok)
    on_gpu = masked_word_attribution(gpu, WORDS, 2, "cat")
    # float32 on either device, different kernels: agreement to ~1e-5 of the scores' size (TF32 off by default)
    np.testing.assert_allclose(on_gpu.table["score"], on_cpu.table["score"], atol=1e-4)
    assert on_gpu.difference == pytest.approx(on_cpu.difference, abs=1e-4)


@pytest.mark.slow
def test_shipped_mlm_attribution_is_complete_and_reasonable():
    from bertology.models import load_model

    lm = load_model("minilm-english-mlm", mlm_head=True)
    words = "The dog barked at the cat .".split()
    a = masked_word_attribution(lm, words, 2, "barked")
    # Gauss-Legendre with 50 points on a real 6-layer model: completeness to ~1% of the difference
    assert abs(a.delta) <= 0.02 * abs(a.difference)
    assert a.difference > 1  # the sentence makes "barked" far more likely than the all-padding baseline
    assert a.by_word().shape == (len(words) - 1, 4) and a.by_word().notna().all().all()  # the masked word apart
    assert a.table.query("method == 'ig' and target")["score"].item() == 0  # the mask is its own baseline


# --------------------------------------------------------------------------- the Live page's section


def test_attribution_figure_shows_each_methods_shares_with_typed_words_as_text(tok):
    from dashboard_planted import MARKUP

    from bertology.apps.pages.live_attribution import attribution_figure

    lm = from_modules("tiny-mlm", tiny_model("bert", mlm=True, initializer_range=0.2), tok)
    words = ["the", "dog", *MARKUP.replace(">", "> ").replace("<", " <").split(), "."]
    a = masked_word_attribution(lm, words, 1, "cat")
    fig = attribution_figure(a)
    assert all(len(line) <= 20 for t in fig.layout.annotations for line in t.text.split("<br>"))  # wrapped
    assert [t.text.replace("<br>", " ") for t in fig.layout.annotations] == [
        "gradient × input",
        "integrated gradients",
        "attention (last layer, mean of heads)",
        "attention rollout",
    ]
    assert fig.data[0].y[1] == "1: dog [[MASK]]" and all("<" not in y for y in fig.data[0].y)
    for trace, method in zip(fig.data, a.methods):
        shares = a.by_word(masked=True)[method].to_numpy()
        assert np.isnan(trace.x[1])  # the masked word: its row, no bar (it is not in the input)
        np.testing.assert_allclose(trace.x, shares)
        read = [i for i in range(len(shares)) if i != 1]
        assert [trace.marker.color[i] for i in read] == ["#1f77b4" if shares[i] >= 0 else "#d62728" for i in read]


def test_live_page_draws_the_attribution_of_the_guess(tmp_path, monkeypatch):
    from dashboard_planted import PLANTED_GUESS, chart_specs, planted_mlm_dir
    from streamlit.testing.v1 import AppTest

    from bertology.models import load_model

    mlm_dir = planted_mlm_dir(tmp_path / "planted-mlm")
    monkeypatch.setenv("BERTOLOGY_RESULTS", str(tmp_path / "results"))
    monkeypatch.chdir(tmp_path)
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "apps" / "dashboard.py"), default_timeout=120)
    at.query_params.update(page="Live", model=str(mlm_dir), text="the old dog said nothing")
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert not [b for b in at.selectbox if b.key == "live_attr_word"]  # one "word to mask" on the page ...
    at.selectbox(key="live_mask").set_value(2).run()  # ... the masked-word section's, which the attribution explains
    specs = [s for s in chart_specs(at) if str(s["layout"]["title"]["text"]).startswith("what planted-mlm")]
    assert len(specs) == 1 and PLANTED_GUESS in specs[0]["layout"]["title"]["text"]
    expected = masked_word_attribution(load_model(mlm_dir, mlm_head=True), "the old dog said nothing".split(), 2)
    ig = next(t for t in specs[0]["data"] if t.get("xaxis") == "x2")
    np.testing.assert_allclose(np.asarray(ig["x"], dtype=float), expected.by_word(masked=True)["ig"], atol=1e-6)
    assert any("log-probability of" in t.value for t in at.text)


def test_a_contrastive_target_explains_the_difference_of_two_log_probabilities(mlm64):
    """Yin & Neubig 2022: log p(target) - log p(foil) at the mask. Gradient x input is linear in the
    output, so the contrast's scores are the target's minus the foil's; integrated gradients stay
    complete; a foil equal to the target, or given to a classifier, is refused."""
    a = masked_word_attribution(mlm64, WORDS, 2, "cat", foil="dog", methods=["gxi", "ig"])
    t = masked_word_attribution(mlm64, WORDS, 2, "cat", methods=["gxi"])
    f = masked_word_attribution(mlm64, WORDS, 2, "dog", methods=["gxi"])
    assert a.output == "log-probability contrast" and a.target == "cat rather than dog"
    assert a.score == pytest.approx(t.score - f.score, abs=1e-12)
    gxi = lambda r: r.token_scores.query("method == 'gxi'")["score"].to_numpy()  # noqa: E731
    np.testing.assert_allclose(gxi(a), gxi(t) - gxi(f), atol=1e-12)
    assert a.token_scores.query("method == 'ig'")["score"].sum() == pytest.approx(a.difference, abs=1e-8)
    with pytest.raises(CorpusError, match="the target itself"):
        masked_word_attribution(mlm64, WORDS, 2, "cat", foil="cat", methods=["gxi"])
    sequence = from_modules("tiny-seq", classifier(tiny_tokenizer("bert"), "sequence"), tiny_tokenizer("bert"))
    with pytest.raises(ConfigError, match="foil"):
        attribute(sequence, WORDS, foil="dog", methods=["gxi"])


def test_the_sentence_is_highlighted_as_lit_does_with_typed_words_escaped(tok):
    from bertology.apps.pages.live_attribution import highlighted_sentence

    lm = from_modules("tiny-mlm", tiny_model("bert", mlm=True, initializer_range=0.2), tok)
    words = ["the", "<b>dog</b>", "said", "."]
    a = masked_word_attribution(lm, words, 2, "cat", methods=["gxi"])
    page = highlighted_sentence(a, "gxi")
    assert "&lt;b&gt;dog&lt;/b&gt;" in page and "<b>" not in page
    assert page.count("background:rgba(") == 3 and "[MASK]" in page  # three words coloured, the mask boxed
    share = a.table.set_index("position").loc[0, "normalised"]
    assert f'title="{share:+.3f}"' in page and ("31,119,180" if share >= 0 else "214,39,40") in page.split("</span>")[0]
