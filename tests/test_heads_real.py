"""Head types of the real MiniLM-L6 on 100 sentences of the bundled Brown sample (silver deps)."""

import pytest


@pytest.mark.slow
@pytest.mark.real_model
def test_minilm_head_types(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTOLOGY_HOME", str(tmp_path))
    from probes.heads import analyse_store
    from workbench.corpus import load_corpus
    from workbench.models import load_model
    from workbench.store import extract

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
    print(types[types["type"].isin(["positional", "syntactic", "rare-token"])][
        ["layer", "head", "type", "positional_offset", "positional_share", "syntactic_relation",
         "syntactic_direction", "syntactic_accuracy", "syntactic_baseline", "rare_share"]].to_string(index=False))
    dep = tables["head_dependency"]
    unlabelled = dep[(dep["relation"] == "all") & (dep["direction"] == "dep->head")]
    # some head attends to the syntactic head far above its best fixed-offset baseline
    assert unlabelled["accuracy"].max() > unlabelled["baseline_accuracy"].iloc[0] - 0.05
    assert (types["type"] == "syntactic").sum() >= 1
    special = tables["head_stats"].query("statistic == 'attn_special'")["value"]
    assert special.between(0, 1).all() and special.max() > 0.3
