"""Head types of the real MiniLM-L6 on 100 sentences of the bundled Brown sample (silver deps)."""

import pytest


@pytest.mark.slow
@pytest.mark.real_model
def test_minilm_head_types(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTOLOGY_HOME", str(tmp_path))
    from bertology.corpus import load_corpus
    from bertology.models import load_model
    from bertology.probes.heads.classification import analyse_store
    from bertology.store import extract

    try:
        lm = load_model("minilm-l6", attentions=True)
    except Exception as exc:  # the model package is optional
        pytest.skip(f"MiniLM not installed: {exc}")
    corpus = load_corpus("brown-sample", limit=100)
    store = extract(lm, corpus, attentions=True, progress=False)
    tables = analyse_store(store, corpus)
    types = tables["head_types"]
    assert len(types) == 6 * 12
    counts = types["type"].value_counts()
    print("\nMiniLM-L6 head types (100 Brown sentences, silver deps):\n" + counts.to_string())
    print(
        types[types["type"].isin(["positional", "syntactic", "rare-token"])][
            [
                "layer",
                "head",
                "type",
                "positional_offset",
                "positional_share",
                "syntactic_relation",
                "syntactic_direction",
                "syntactic_accuracy",
                "syntactic_baseline",
                "rare_share",
            ]
        ].to_string(index=False)
    )
    dep = tables["head_dependency"]
    unlabelled = dep[(dep["relation"] == "all") & (dep["direction"] == "dependent_attends_to_head")]
    # some head attends to the syntactic head far above its best fixed-offset baseline
    assert unlabelled["accuracy"].max() > unlabelled["baseline_accuracy"].iloc[0] - 0.05
    assert (types["type"] == "syntactic").sum() >= 1
    special = tables["head_stats"].query("statistic == 'attn_special'")["value"]
    assert special.between(0, 1).all() and special.max() > 0.3


@pytest.mark.slow
@pytest.mark.real_model
def test_minilm_attention_probes_rank_as_in_clark(tmp_path, monkeypatch):
    """Clark et al. (BERT-base, gold trees): attention + GloVe (≈77) well above both the
    attention-only probe and a distances + GloVe baseline; MiniLM's word attention with spaCy's
    GloVe-style vectors keeps that ordering."""
    monkeypatch.setenv("BERTOLOGY_HOME", str(tmp_path))
    from bertology.corpus import load_corpus
    from bertology.models import load_model
    from bertology.probes.embeddings.static_vectors import load_spacy_vectors
    from bertology.probes.heads.attention_probe import attention_probe
    from bertology.store import extract

    try:
        lm = load_model("minilm-l6", attentions=True)
        vectors = load_spacy_vectors("en")
    except Exception as exc:  # the model / vector packages are optional
        pytest.skip(f"MiniLM or spaCy vectors not installed: {exc}")
    corpus = load_corpus("brown-sample", limit=200)
    store = extract(lm, corpus, attentions=True, progress=False)
    table = attention_probe(
        [store.attention(i) for i in range(len(corpus))], list(corpus), seed=0, word_vectors=vectors
    ).set_index("method")["uas"]
    print("\nMiniLM-L6 dependency probes (200 Brown sentences, silver deps, UAS):\n" + table.to_string())
    assert table["attention_and_words"] > table["distances_and_words"] + 0.03
    assert table["attention_and_words"] > table["learned_combination"] + 0.1
    assert table["learned_combination"] > table["best_head"]
