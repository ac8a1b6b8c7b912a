"""Edge-probing tasks: builders from a corpus, JSONL round trip and errors, splits."""

from types import SimpleNamespace

import numpy as np
import pytest

from bertology.errors import WorkbenchError
from bertology.probes.probing.tasks import (
    EdgeExample,
    EdgeTask,
    TaskError,
    build_task,
    deps_task,
    entities_task,
    pos_task,
    read_jsonl,
    split_by_sentence,
    write_jsonl,
    xpos_task,
)


def _corpus():
    ent = lambda s, e, l: SimpleNamespace(start=s, end=e, label=l)  # noqa: E731
    s1 = SimpleNamespace(
        sent_id="a",
        words=["The", "cat", "sat", "."],
        upos=["DET", "NOUN", "VERB", "PUNCT"],
        xpos=["DT", "NN", "VBD", "."],
        heads=[2, 3, 0, 3],
        deprels=["det", "nsubj", "root", "punct"],
        entities=[],
    )
    s2 = SimpleNamespace(
        sent_id="b",
        words=["New", "York", "sleeps"],
        upos=["PROPN", "PROPN", "VERB"],
        xpos=["NNP", "NNP", "VBZ"],
        heads=[2, 3, 0],
        deprels=["compound", "nsubj", "root"],
        entities=[ent(0, 2, "GPE")],
    )
    return SimpleNamespace(
        name="toy", sentences=[s1, s2], sources={"upos": "gold: toy", "deps": "silver: toy", "entities": "silver: toy"}
    )


def test_builders_read_the_corpus():
    c = _corpus()
    pos = pos_task(c)
    assert len(pos) == 7 and pos.examples[1] == EdgeExample(0, (1, 2), None, ("NOUN",))
    assert pos.source == "gold: toy" and "PROPN" in pos.labels and not pos.multilabel
    assert xpos_task(c).examples[0].labels == ("DT",)
    deps = deps_task(c)
    assert len(deps) == 5 and deps.n_spans == 2  # roots skipped
    assert deps.examples[0] == EdgeExample(0, (0, 1), (1, 2), ("det",))
    assert deps.source.startswith("silver")
    ents = entities_task(c)
    assert ents.examples == [EdgeExample(1, (0, 2), None, ("GPE",))]
    assert build_task(c, "pos").labels == pos.labels
    with pytest.raises(TaskError, match="unknown task"):
        build_task(c, "srl")


def test_bad_head_names_sentence():
    c = _corpus()
    c.sentences[0].heads = [9, 3, 0, 3]
    with pytest.raises(TaskError, match="sentence a word 1"):
        deps_task(c)


def test_jsonl_round_trip_two_spans_and_multilabel(tmp_path):
    words = [["a", "b", "c"], ["d", "e"]]
    ex = [EdgeExample(0, (0, 1), (2, 3), ("x", "y")), EdgeExample(1, (0, 2), (1, 2), ("y",))]
    task = EdgeTask("t", ex, ["x", "y"], "gold: test", multilabel=True, words=words)
    path = tmp_path / "t.jsonl"
    write_jsonl(task, path)
    back = read_jsonl(path)
    assert back.examples == task.examples and back.words == words
    assert back.multilabel and back.labels == ["x", "y"] and back.name == "t"


def test_jsonl_errors_name_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"text": "a b", "targets": [{"span1": [0, 1], "label": "x"}]}\n'
        '{"text": "a b", "targets": [{"span1": [0, 5], "label": "x"}]}\n'
    )
    with pytest.raises(WorkbenchError, match=r"bad.jsonl:2 target 0 span1"):
        read_jsonl(path)
    path.write_text('{"text": "a b", "targets": []}\nnot json\n')
    with pytest.raises(TaskError, match=r"bad.jsonl:2: not JSON"):
        read_jsonl(path)
    path.write_text(
        '{"text": "a b", "targets": [{"span1": [0, 1], "label": "x"}, '
        '{"span1": [0, 1], "span2": [1, 2], "label": "x"}]}\n'
    )
    with pytest.raises(TaskError, match="bad.jsonl:1 target 1"):
        read_jsonl(path)
    with pytest.raises(TaskError, match="not found"):
        read_jsonl(tmp_path / "missing.jsonl")


def test_split_keeps_sentences_together_and_is_seeded():
    ex = [EdgeExample(s, (i, i + 1), None, ("a" if i % 2 else "b",)) for s in range(50) for i in range(4)]
    task = EdgeTask("t", ex, ["a", "b"], "gold")
    split = split_by_sentence(task, seed=3)
    sent = task.sentence_ids()
    sets = [set(sent[v]) for v in split.values()]
    assert not (sets[0] & sets[1]) and not (sets[0] & sets[2]) and not (sets[1] & sets[2])
    assert sum(len(v) for v in split.values()) == len(task)
    assert len(sets[0]) == 40 and len(sets[1]) == 5
    again = split_by_sentence(task, seed=3)
    assert all(np.array_equal(split[k], again[k]) for k in split)
    assert not np.array_equal(split["test"], split_by_sentence(task, seed=4)["test"])
