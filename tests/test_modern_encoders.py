"""What the modern encoders of the architecture table (ModernBERT, EuroBERT, NomicBERT) add beyond
the end-to-end checks every type gets in test_architectures.py: local attention windows per layer,
the fused query-key-value projection, grouped-query attention (gated, never really pruned), and
byte-level tokenizers whose tokenizer.json has no prefix-space option."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from bertology.architectures import (
    architecture_for,
    attention_windows,
    ensure_prefix_space,
    key_value_heads,
    supported_types,
)
from bertology.errors import ModelError
from bertology.models import load_model
from bertology.probes.heads.gates import HeadGates, attention_blocks, gates_from_heads, prune_heads
from bertology.testing import save_tiny_model_dir, tiny_model, tiny_tokenizer

MODERN = ("modernbert", "eurobert", "nomic_bert")


def _ids(n: int = 2, length: int = 11, seed: int = 0) -> dict[str, torch.Tensor]:
    ids = torch.randint(10, 200, (n, length), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones(n, length, dtype=torch.long)
    mask[-1, length - 3 :] = 0 if n > 1 else 1  # padding in the last example of a batch
    return {"input_ids": ids, "attention_mask": mask}


def test_modern_types_are_in_the_table():
    assert set(MODERN) <= set(supported_types())
    assert architecture_for("modernbert").qkv == "attn.Wqkv"
    assert architecture_for("eurobert").kv_heads_field == "num_key_value_heads"


def test_local_layers_record_their_window_and_cannot_see_past_it():
    """tiny ModernBERT: layer 0 global, layer 1 local with local_attention=4 (2 tokens each side).
    The eager attention maps are exactly 0 beyond the recorded window and positive inside it."""
    model = tiny_model("modernbert")
    assert model.config.layer_types == ["full_attention", "sliding_attention"]
    assert attention_windows(model) == [None, 2]
    batch = _ids(n=1, length=12)
    with torch.no_grad():
        att = model(**batch, output_attentions=True).attentions  # [1, H, T, T] per layer
    T = batch["input_ids"].shape[1]
    distance = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).abs()
    assert (att[0][0] > 0).all()  # global: every token in reach
    local = att[1][0]
    assert (local[:, distance > 2] == 0).all() and (local[:, distance <= 2] > 0).all()
    for model_type in ("eurobert", "nomic_bert", "bert"):
        assert attention_windows(tiny_model(model_type)) == [None, None]


def test_unknown_layer_types_are_refused():
    model = tiny_model("modernbert")
    config = copy.deepcopy(model.config)
    config.layer_types = ["full_attention", "chunked_attention"]
    with pytest.raises(ModelError, match="modernbert.*chunked_attention"):
        attention_windows(config)
    with pytest.raises(ModelError, match="modernbert.*chunked_attention"):
        architecture_for(config)  # what load_model asks first


def test_fused_qkv_pruning_keeps_the_right_rows():
    """Wqkv rows are [q | k | v], each heads-major: pruning head 1 of 4 keeps, in each third, the
    rows of heads 0, 2, 3 -- planted by numbering the rows."""
    model = tiny_model("modernbert")
    block = attention_blocks(model)[0]
    d, width = block.head_dim, block.n_heads * block.head_dim
    with torch.no_grad():
        block.qkv.weight.copy_(torch.arange(3 * width, dtype=torch.float32)[:, None].expand_as(block.qkv.weight))
    pruned = prune_heads(copy.deepcopy(model), {0: [1]})
    kept_rows = attention_blocks(pruned)[0].qkv.weight[:, 0].long().tolist()
    expected = [part * width + head * d + i for part in range(3) for head in (0, 2, 3) for i in range(d)]
    assert kept_rows == expected
    assert attention_blocks(pruned)[0].output.in_features == 3 * d


def test_modernbert_states_do_not_depend_on_the_attention_implementation(tmp_path):
    """load_model(attentions=False) runs SDPA (transformers may unpad there); the states equal the
    eager model's on a padded batch, at the real tokens."""
    directory = save_tiny_model_dir("modernbert", tmp_path / "m")
    eager, sdpa = load_model(directory), load_model(directory, attentions=False)
    assert eager.config._attn_implementation == "eager" and sdpa.config._attn_implementation == "sdpa"
    batch = _ids()
    mask = batch["attention_mask"].bool()
    with torch.no_grad():
        a = eager.model(**batch, output_hidden_states=True).hidden_states
        b = sdpa.model(**batch, output_hidden_states=True).hidden_states
    for x, y in zip(a, b):
        torch.testing.assert_close(x[mask], y[mask], atol=1e-5, rtol=1e-5)


def test_grouped_query_attention_gates_query_heads_and_refuses_pruning():
    """EuroBERT with 2 key / value heads for 4 query heads: a gate on query head 1 equals zeroing
    that head's columns of the output projection; real pruning is refused, naming the reason."""
    model = tiny_model("eurobert", num_key_value_heads=2)
    assert key_value_heads(model) == 2 and attention_blocks(model)[0].key.out_features == 2 * 8
    batch = _ids()

    def out(m):
        with torch.no_grad():
            return m(**batch).last_hidden_state

    base = out(model)
    with HeadGates(model, gates_from_heads(model, {1: [1]})):
        gated = out(model)
    assert (gated - base).abs().max() > 1e-4
    zeroed = copy.deepcopy(model)
    block = attention_blocks(zeroed)[1]
    with torch.no_grad():
        block.output.weight[:, block.head_dim : 2 * block.head_dim] = 0
    torch.testing.assert_close(gated, out(zeroed), atol=1e-6, rtol=1e-6)
    with pytest.raises(ModelError, match=r"eurobert uses grouped-query attention \(num_key_value_heads=2.*HeadGates"):
        prune_heads(copy.deepcopy(model), {0: [1]})
    prune_heads(copy.deepcopy(model), {})  # nothing to remove: nothing refused


@pytest.mark.parametrize("model_type", ["modernbert", "eurobert"])
def test_generic_byte_level_tokenizer_gets_a_prefix_space_once(model_type, tmp_path):
    """The tokenizer.json of these types keeps a byte-level pre-tokenizer without a prefix space:
    as shipped, a pre-split word is cut as the start of a text (no Ġ); loading adds the space, and
    a tokenizer saved after loading is not given a second one."""
    raw = tiny_tokenizer(model_type)
    split = raw(["it", "dog"], is_split_into_words=True, add_special_tokens=False).tokens()
    assert split == ["it", "dog"]  # the defect the loader repairs
    lm = load_model(save_tiny_model_dir(model_type, tmp_path / "m"))
    assert lm.tokenizer(["it", "dog"], is_split_into_words=True, add_special_tokens=False).tokens() == [
        "\u0120it",
        "\u0120dog",
    ]
    lm.tokenizer.save_pretrained(tmp_path / "m")
    again = load_model(tmp_path / "m").tokenizer
    assert again(["dog"], is_split_into_words=True, add_special_tokens=False).tokens() == ["\u0120dog"]
    assert not ensure_prefix_space(again)  # already has it
    assert not ensure_prefix_space(tiny_tokenizer("bert"))  # WordPiece: nothing to do


def test_head_types_run_records_the_local_windows(tmp_path, one_torch_thread):
    """A head-types run over a tiny ModernBERT (layer 1 local, 2 tokens each side) records the
    window per layer in the manifest and per head in head_stats and head_types; global = <NA>."""
    from bertology.results import read_manifest, read_table
    from bertology.studies import run_study

    directory = save_tiny_model_dir("modernbert", tmp_path / "modernbert")
    run = run_study(
        "head_types",
        overrides={"model": str(directory), "limit": 6, "word_vectors": "none"},
        results_root=tmp_path / "results",
        log=lambda _m: None,
    )
    assert read_manifest(run)["attention_windows"] == [None, 2]
    for name in ("head_stats", "head_types"):
        table = read_table(run, name)
        by_layer = table.groupby("layer")["attention_window"]
        assert by_layer.apply(lambda w: w.isna().all()).tolist() == [True, False], name
        assert (table.loc[table["layer"] == 2, "attention_window"] == 2).all(), name  # layers from 1
    reach = read_table(run, "window_reach")
    assert set(reach["layer"]) == {2} and set(reach["statistic"]) >= {"word_pairs_in_reach", "cls_in_reach"}
    assert ((reach["value"] > 0) & (reach["value"] < 1)).all()
    in_reach = read_table(run, "head_dependency_in_reach")  # the local layer's heads on the arcs they can see
    assert set(in_reach["layer"]) == {2} and (in_reach["n_in_reach"] <= in_reach["n"]).all()
    assert (in_reach["accuracy"] <= in_reach["arcs_in_reach"] + 1e-12).all()
    stats = read_table(run, "head_stats").pivot_table(index=["layer", "head"], columns="statistic", values="value")
    for plain in ("entropy_norm", "attn_cls", "attn_sep", "attn_special"):  # global layer: in reach = plain
        assert stats.loc[1, f"{plain}_in_reach"].to_numpy() == pytest.approx(stats.loc[1, plain].to_numpy())
    assert (stats.loc[2, "entropy_norm_in_reach"] >= stats.loc[2, "entropy_norm"] - 1e-12).all()
    assert (stats.loc[2, "attn_cls_in_reach"] >= stats.loc[2, "attn_cls"] - 1e-12).all()


def test_window_column_refuses_a_table_of_other_layers():
    import pandas as pd

    from bertology.errors import WorkbenchError
    from bertology.probes.heads.stats import with_attention_windows

    table = pd.DataFrame({"layer": [1, 2, 2], "head": [1, 1, 2]})  # layers numbered from 1
    assert with_attention_windows(table, [None, 3])["attention_window"].tolist() == [pd.NA, 3, 3]
    with pytest.raises(WorkbenchError, match=r"windows for layers 1\.\.1"):
        with_attention_windows(table, [None])


@pytest.mark.parametrize("model_type, config", [("modernbert", {}), ("eurobert", {"num_key_value_heads": 2})])
def test_pruning_study_runs_and_skips_real_removal_only_where_refused(model_type, config, tmp_path, one_torch_thread):
    """The pruning study on a tiny MLM model: importance and curves through gates for both; the
    real-removal cost table for ModernBERT, none (reason recorded) under grouped-query attention."""
    from bertology.results import read_manifest, read_table
    from bertology.studies import run_study

    directory = save_tiny_model_dir(model_type, tmp_path / model_type, mlm=True, **config)
    run = run_study(
        "pruning",
        overrides={"model": str(directory), "limit": 12, "methods": ["importance"], "step": 0.5, "l0_lambdas": []},
        results_root=tmp_path / "res",
        log=lambda _m: None,
    )
    manifest = read_manifest(run)
    assert manifest["pruning_metric"].startswith("MLM loss")
    assert len(read_table(run, "importance")) == 8
    if config:
        assert "pruning_cost" not in manifest["tables"]
        assert "grouped-query attention (num_key_value_heads=2" in manifest["pruning_cost_skipped"]
    else:
        assert "pruning_cost" in manifest["tables"] and "pruning_cost_skipped" not in manifest


def test_in_memory_models_get_the_prefix_space_too():
    from bertology.models import from_modules

    lm = from_modules("tiny-modernbert", tiny_model("modernbert"), tiny_tokenizer("modernbert"))
    assert lm.tokenizer(["it", "dog"], is_split_into_words=True, add_special_tokens=False).tokens() == [
        "\u0120it",
        "\u0120dog",
    ]


def test_reachable_words_by_hand():
    from bertology.probes.heads.stats import reachable_words, special_reach

    word_ids = [-1, 0, 0, 1, 2, 2, 2, 3, -1]  # [CLS] w0 w0 w1 w2 w2 w2 w3 [SEP]
    expected = [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]]
    assert reachable_words(word_ids, 1, 4).astype(int).tolist() == expected
    assert reachable_words(word_ids, None, 4).all()
    assert special_reach(word_ids, 1, 4).astype(int).tolist() == [[1, 0], [0, 0], [0, 0], [0, 1]]
    assert special_reach([0, 1], 1, 2).tolist() == [[False, False], [False, False]]  # no special tokens


def test_stored_maps_of_a_local_layer_are_zero_exactly_out_of_reach(tmp_path):
    """End to end through extraction and word pooling: in ModernBERT's local layer every word pair
    out of reach (reachable_words with the recorded window) has no attention, every pair in reach
    has some; the same for the special tokens."""
    from bertology.corpus import load_corpus
    from bertology.features import tokenize_sentences
    from bertology.probes.heads.stats import reachable_words, special_reach
    from bertology.store import extract

    lm = load_model(save_tiny_model_dir("modernbert", tmp_path / "m"))
    corpus = load_corpus("brown-sample", limit=4)
    store = extract(lm, corpus, root=tmp_path / "store", progress=False)
    (window_global, window_local) = attention_windows(lm.model)
    encoded = tokenize_sentences(lm.tokenizer, [s.words for s in corpus])
    for i, (_, word_ids) in enumerate(encoded):
        n = len(corpus[i].words)
        reach, special = reachable_words(word_ids, window_local, n), special_reach(word_ids, window_local, n)
        assert not reach.all()  # long enough to leave the window
        local = store.attention(i, normalise=False)[1]  # [H, W, W]
        assert (local[:, ~reach] == 0).all() and (local[:, reach] > 0).all()
        local_special = store.special_attention(i)[1]  # [H, W, 2]
        assert (local_special[:, ~special] == 0).all() and (local_special[:, special] > 0).all()
        assert (store.attention(i, normalise=False)[0] > 0).all() and window_global is None


def test_window_reach_counts_pairs_arcs_and_special_tokens():
    from bertology.corpus import Sentence
    from bertology.probes.heads.stats import window_reach

    tok = tiny_tokenizer("bert")  # WordPiece: one piece per known word
    sentence = Sentence(
        "s1",
        ["the", "dog", "said", "the", "jury"],
        heads=[2, 3, 0, 5, 3],
        deprels=["det", "nsubj", "root", "det", "obj"],
        upos=None,
        xpos=None,
        entities=None,
    )
    table = window_reach(tok, [sentence], [None, 1])
    values = table.set_index("statistic")["value"]
    assert set(table["layer"]) == {2} and set(table["attention_window"]) == {1}  # the second layer (index 1)
    assert values["word_pairs_in_reach"] == pytest.approx(8 / 20)  # neighbours only
    assert values["arcs_in_reach"] == pytest.approx(3 / 4)  # jury -> said is 2 words away
    assert values["cls_in_reach"] == pytest.approx(1 / 5) and values["sep_in_reach"] == pytest.approx(1 / 5)
    assert window_reach(tok, [sentence], [None, None]).empty


def test_a_local_heads_accuracy_is_also_read_on_the_arcs_it_can_see():
    """Planted argmaxes: layer 1 (window 1 token each side) hits every arc within reach; the one arc
    two words away (jury -> said) it cannot see. Over all arcs its accuracy is 3/4, in reach 3/3."""
    import numpy as np

    from bertology.corpus import Sentence
    from bertology.probes.heads.classification import dependency_scores_in_reach

    tok = tiny_tokenizer("bert")
    sentence = Sentence(
        "s1",
        ["the", "dog", "said", "the", "jury"],
        heads=[2, 3, 0, 5, 3],
        deprels=["det", "nsubj", "root", "det", "obj"],
        upos=None,
        xpos=None,
        entities=None,
    )
    attention = np.full((2, 2, 5, 5), 0.01)
    for dependent, head in ((0, 1), (1, 2), (3, 4)):  # the arcs within one token
        attention[1, 0, dependent, head] = 1.0  # head 0 of the local layer follows them
    attention[1, 0, 4, 3] = 1.0  # jury: its head (said) is out of reach
    attention[1, 1, :, :] += np.eye(5, k=-1)  # head 1: always the previous word
    attention[1, 1, 0, 4] = 1.0  # (the first word: the last one)
    table = dependency_scores_in_reach([attention], [sentence], tok, [None, 1])
    # the table numbers layers and heads from 1: array index 1 is layer 2; the global layer 1: no rows
    assert set(table["layer"]) == {2} and (table["attention_window"] == 1).all()
    row = table[(table["relation"] == "all") & (table["head"] == 1)].iloc[0]
    assert (row["n"], row["n_in_reach"], row["correct"]) == (4, 3, 3)
    assert row["accuracy"] == pytest.approx(0.75) and row["accuracy_in_reach"] == pytest.approx(1.0)
    assert row["arcs_in_reach"] == pytest.approx(0.75)
    previous = table[(table["relation"] == "all") & (table["head"] == 2)].iloc[0]
    assert previous["correct"] == 0  # every arc here points right
    obj = table[(table["relation"].isin(["obj", "dobj"])) & (table["head"] == 1)].iloc[0]  # named as Voita et al.
    assert (obj["n"], obj["n_in_reach"]) == (1, 0) and np.isnan(obj["accuracy_in_reach"])
    assert dependency_scores_in_reach([attention], [sentence], tok, [None, None]).empty


def test_entropy_and_special_shares_are_also_read_on_what_a_head_can_reach():
    """Window 1 over 4 one-piece words ([CLS] w0 w1 w2 w3 [SEP]): each word reaches itself and its
    neighbours (w0 also [CLS], w3 also [SEP]): three entries a row. A head spreading each row
    uniformly over them has entropy_norm_in_reach 1, while its plain entropy_norm divides by log2 of
    all 6 entries; [CLS] gets 1/3 of w0's row only: attn_cls averages 1/12 over the 4 rows, 1/3 over
    the one row that can reach it."""
    from bertology.probes.heads.stats import HeadStatistics, sentence_reach

    word_ids = [-1, 0, 1, 2, 3, -1]
    reach = sentence_reach(word_ids, [1], 4)  # [1, 4, 6]
    assert reach[0].astype(int).tolist() == [
        [1, 1, 0, 0, 1, 0],
        [1, 1, 1, 0, 0, 0],
        [0, 1, 1, 1, 0, 0],
        [0, 0, 1, 1, 0, 1],
    ]
    rows = reach[0] / reach[0].sum(-1, keepdims=True)  # uniform over what each row reaches
    words, special = rows[None, None, :, :4], rows[None, None, :, 4:]
    stats = HeadStatistics(special_tokens="keep")
    stats.update(words, special=special, reach=reach)
    means = {k: float(v[0, 0]) for k, v in stats.means().items()}
    assert means["entropy_norm_in_reach"] == pytest.approx(1.0)
    assert means["entropy_norm"] == pytest.approx(math.log2(3) / math.log2(6))
    assert means["attn_cls"] == pytest.approx(1 / 3 / 4) and means["attn_cls_in_reach"] == pytest.approx(1 / 3)
    assert means["attn_special_in_reach"] == pytest.approx((1 / 3 + 1 / 3) / 2)
    table = stats.table().set_index("statistic")
    assert table.loc["attn_cls_in_reach", "n"] == 1 and table.loc["attn_cls", "n"] == 4
