"""Static vectors: word2vec text format, sources (input embeddings, word2vec, distilled)."""

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertModel, BertTokenizerFast

from bertology.probes.embeddings.static_vectors import (
    StaticVectors,
    VectorFileError,
    distill_static,
    from_input_embeddings,
    read_word2vec,
    train_word2vec,
    word_vectors_from_pieces,
)


def test_word2vec_text_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    v = StaticVectors(["the", "chat", "été", "1990"], rng.normal(size=(4, 7)).astype(np.float32), "toy")
    path = v.save_word2vec(tmp_path / "v.txt")
    assert path.read_text(encoding="utf-8").splitlines()[0] == "4 7"
    back = read_word2vec(path)
    assert back.words == v.words and np.array_equal(back.matrix, v.matrix)
    assert back.index("été") == 2 and "chat" in back and "dog" not in back
    assert read_word2vec(path, limit=2).words == ["the", "chat"]


def test_glove_style_file_without_header(tmp_path):
    p = tmp_path / "glove.txt"
    p.write_text("a 1 0\nb 0 1\n", encoding="utf-8")
    v = read_word2vec(p)
    assert v.dim == 2 and v.most_similar("a", 1)["word"].tolist() == ["b"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("2 3\nx 1 2 3\ny 1 2\n", r"v\.txt:3: expected a word and 3 numbers, got 2"),
        ("2 3\nx 1 2 3\ny 1 zz 3\n", r"v\.txt:3: non-numeric"),
        ("2 3\nx 1 2 3\n", r"header says 2 words, file has 1"),
        ("two 3\n", r"v\.txt:1: header"),
        ("x\n", r"v\.txt:1: expected a word and its vector's numbers, got 'x'"),  # was a 0-dim vector
        ("Some notes, not vectors.\n", r"v\.txt:1: non-numeric value in vector of 'Some'"),
        ("", r"v\.txt: holds no word vectors"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, text, message):
    p = tmp_path / "v.txt"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(VectorFileError, match=message):
        read_word2vec(p)


def test_missing_file_and_bad_word(tmp_path):
    with pytest.raises(VectorFileError, match="no such"):
        read_word2vec(tmp_path / "absent.txt")
    with pytest.raises(VectorFileError, match="whitespace"):
        StaticVectors(["a b"], np.zeros((1, 2))).save_word2vec(tmp_path / "x.txt")


def test_most_similar_planted():
    m = np.array([[1, 0], [0.9, 0.1], [0, 1], [-1, 0]], np.float32)
    v = StaticVectors(["a", "near", "far", "opposite"], m)
    df = v.most_similar("a", 3)
    assert df["word"].tolist() == ["near", "far", "opposite"] and list(df.columns) == ["rank", "word", "similarity"]
    assert df["similarity"].iloc[-1] == pytest.approx(-1.0)


def test_distill_static_means_occurrences():
    vecs = np.array([[1, 0], [3, 0], [0, 2], [0, 4], [5, 5]], np.float32)
    v = distill_static(vecs, ["Bank", "bank", "river", "River", "x"], lower=True)
    assert v.words == ["bank", "river", "x"] and v.metadata["counts"] == [2, 2, 1]
    assert np.allclose(v.vector("bank"), [2, 0]) and np.allclose(v.vector("river"), [0, 3])
    assert distill_static(vecs, ["a", "a", "b", "b", "c"], min_count=2).words == ["a", "b"]


def test_input_embeddings_and_mean_of_pieces():
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "play", "##ing", "game"]
    tok = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    torch.manual_seed(0)
    model = BertModel(
        BertConfig(
            vocab_size=len(vocab), hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16
        )
    )
    v = from_input_embeddings(model, tok)
    w = model.get_input_embeddings().weight.detach().numpy()
    assert v.words[: len(vocab)] == vocab and np.allclose(v.vector("game"), w[7])
    pieces = word_vectors_from_pieces(model, tok, ["playing", "game"])
    assert pieces.metadata["n_pieces"] == [2, 1]
    assert np.allclose(pieces.vector("playing"), (w[5] + w[6]) / 2, atol=1e-6)


def test_word2vec_is_deterministic_for_a_seed():
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(20)]
    sents = [[words[j] for j in rng.integers(0, 20, 8)] for _ in range(200)]
    a = train_word2vec(sents, dim=10, min_count=1, epochs=2, seed=3)
    b = train_word2vec(sents, dim=10, min_count=1, epochs=2, seed=3)
    assert a.words == b.words and np.array_equal(a.matrix, b.matrix) and a.matrix.shape == (20, 10)
