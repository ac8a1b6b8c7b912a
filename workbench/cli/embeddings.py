"""``bertology embeddings`` (contextuality per layer + static sources) and ``bertology align``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd
import typer

from bertology.errors import WorkbenchError


def load_space(spec: str, lower: bool = True) -> Any:
    """A ``StaticVectors`` from ``spacy:en`` / ``spacy:fr``, ``store:<dir>:<layer>`` (distilled mean
    of a feature store layer) or a word2vec text file path."""
    from bertology.probes.embeddings.static_vectors import distill_static, load_spacy_vectors, read_word2vec

    if spec.startswith("spacy:"):
        return load_spacy_vectors(spec.split(":", 1)[1])
    if spec.startswith("store:"):
        from bertology.store import open_store

        body = spec[len("store:"):]
        path, _, layer = body.rpartition(":")
        if not path or not layer.lstrip("-").isdigit():
            raise WorkbenchError(f"{spec!r}: use store:<store dir>:<layer number>")
        store = open_store(path)
        words = _store_words(store)
        vectors = distill_static(store.layer(int(layer)), words, lower=lower, name=f"{Path(path).name}@{layer}")
        return vectors
    return read_word2vec(spec)


def _store_words(store: Any) -> list[str]:
    """The flat corpus words of a store: reload its corpus (name or path) and check the fingerprint."""
    from bertology.corpus import bundled_corpora, load_corpus

    info = store.manifest.get("corpus", {})
    name = info.get("name") if info.get("name") in bundled_corpora() else (info.get("path") or info.get("name"))
    corpus = load_corpus(name, limit=store.n_sentences)
    if info.get("fingerprint") and corpus.fingerprint != info["fingerprint"]:
        raise WorkbenchError(f"{store.path}: its corpus {info.get('name')!r} changed since extraction")
    return corpus.flat_words()


def embedding_tables(
    layers: np.ndarray, words: list[str], offsets: np.ndarray, input_vectors: Any = None,
    static_layers: tuple[int, ...] = (0, -1), min_occurrences: int = 5, seed: int = 0,
    word2vec_epochs: int = 5,
) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """Contextuality per layer plus static sources of one corpus.

    ``layers`` ``[n_layers, n_words, dim]``. Returns tables ``contextuality`` (layer, metric, raw,
    baseline, adjusted, n_items, seed), ``contextuality_long`` and ``static_sources`` (source,
    n_words, dim), and the ``StaticVectors`` built (``distilled@<l>``, ``word2vec``, ``input``).
    """
    from bertology.probes.embeddings.contextuality import contextuality, to_long
    from bertology.probes.embeddings.static_vectors import distill_static, train_word2vec

    ctx = contextuality(layers, words, offsets, min_occurrences=min_occurrences, seed=seed)
    spaces: dict[str, Any] = {}
    for l in static_layers:
        li = l % len(layers)
        spaces[f"distilled@{li}"] = distill_static(layers[li], words, name=f"distilled@{li}")
    sentences = [[w.lower() for w in words[a:b]] for a, b in zip(offsets[:-1], offsets[1:])]
    spaces["word2vec"] = train_word2vec(sentences, dim=100, min_count=min(5, min_occurrences), seed=seed,
                                        epochs=word2vec_epochs)
    if input_vectors is not None:
        spaces["input"] = input_vectors
    static = pd.DataFrame([{"source": k, "n_words": len(v), "dim": v.dim} for k, v in spaces.items()])
    return {"contextuality": ctx, "contextuality_long": to_long(ctx), "static_sources": static}, spaces


def register(app: typer.Typer) -> None:
    @app.command("embeddings")
    def embeddings_cmd(
        model: str = typer.Option("minilm-l6", help="registry name or model directory"),
        corpus: str = typer.Option("brown-sample", help="bundled name or a .conllu/.bio/.txt file"),
        limit: Optional[int] = typer.Option(None, help="first N sentences only"),
        min_occurrences: int = typer.Option(5, help="words with fewer occurrences are left out of self-similarity/MEV"),
        seed: int = typer.Option(0),
        out: Optional[Path] = typer.Option(None, help="run directory (default results/embeddings/<time>)"),
    ) -> None:
        """Static vs contextual: Ethayarajh's self-similarity, intra-sentence similarity and MEV per
        layer, plus static vectors (distilled first/last layer, word2vec, input embeddings) as
        word2vec text files."""
        from bertology.probes.embeddings.static_vectors import word_vectors_from_pieces
        from bertology import paths
        from bertology.corpus import load_corpus
        from bertology.models import load_model
        from bertology.results import write_results
        from bertology.store import extract

        lm = load_model(model, attentions=False)
        c = load_corpus(corpus, limit=limit)
        store = extract(lm, c, attentions=False)
        words = c.flat_words()
        inputs = word_vectors_from_pieces(lm.encoder, lm.tokenizer, sorted({w.lower() for w in words}), name="input")
        tables, spaces = embedding_tables(store.layers(), words, c.word_offsets(), inputs,
                                          min_occurrences=min_occurrences, seed=seed)
        run = out or paths.results_dir() / "embeddings" / time.strftime("%Y%m%d-%H%M%S")
        for name, vec in spaces.items():
            vec.save_word2vec(Path(run) / f"vectors-{name.replace('@', '-')}.txt")
        write_results(run, tables, {"analysis": "embeddings", "model": lm.name, "model_fingerprint": lm.fingerprint,
                                    "corpus": c.name, "corpus_fingerprint": c.fingerprint, "seed": seed})
        ctx = tables["contextuality"].pivot(index="layer", columns="metric", values="adjusted")
        typer.echo("adjusted (raw − anisotropy baseline):\n" + ctx.round(3).to_string())
        typer.echo(f"wrote {run}")

    @app.command("align")
    def align_cmd(
        source: str = typer.Option("spacy:en", help="word2vec text file, spacy:en|fr, or store:<dir>:<layer>"),
        target: str = typer.Option("spacy:fr", help="word2vec text file, spacy:en|fr, or store:<dir>:<layer>"),
        dictionary: str = typer.Option("eng-fra", help="FreeDict pair (eng-fra, eng-spa, eng-deu) or 'identical' "
                                                        "(same vocabulary: two layers, corpora or models)"),
        method: str = typer.Option("procrustes", help="procrustes | lstsq | self-learning"),
        retrieval: str = typer.Option("csls", help="nn | csls"),
        seed_dictionary: str = typer.Option("identical", help="self-learning seed: identical | numerals"),
        n_train: int = typer.Option(5000, help="training pairs (supervised methods)"),
        n_test: int = typer.Option(1500, help="held-out source words"),
        normalization: str = typer.Option("unit-center-unit", help="none | unit | center | unit-center-unit"),
        top: int = typer.Option(20, help="most-moved words to list ('identical' dictionary)"),
        seed: int = typer.Option(0),
        out: Optional[Path] = typer.Option(None, help="run directory (default results/align/<time>)"),
    ) -> None:
        """Align two vector spaces with a rotation (or least squares / self-learning) and score
        word translation P@1/5/10 on held-out words over the whole target vocabulary."""
        from bertology.probes.embeddings.alignment import align, identical_pairs, most_moved_words
        from bertology.probes.embeddings.dictionaries import bilingual_pairs, filter_to_vocab, split_dictionary
        from bertology import paths
        from bertology.results import write_results

        if retrieval not in ("nn", "csls"):
            raise WorkbenchError(f"--retrieval must be nn or csls, not {retrieval!r}")
        src, tgt = load_space(source), load_space(target)
        if dictionary == "identical":
            pairs = identical_pairs(src, tgt)
        else:
            if dictionary.count("-") != 1:
                raise WorkbenchError(f"--dictionary {dictionary!r}: use e.g. eng-fra or identical")
            a, b = dictionary.split("-")
            pairs = filter_to_vocab(bilingual_pairs(a, b), src.words, tgt.words)
        train, test = split_dictionary(pairs, n_test_sources=min(n_test, pairs["source"].nunique() // 2),
                                       n_train=n_train, seed=seed)
        held_out = set(test["source"])
        res = align(src, tgt, None if method == "self-learning" else train, method=method,
                    normalization=normalization, seed_dictionary=seed_dictionary, exclude_from_seed=held_out)
        ev = res.evaluate(src, tgt, test, retrieval=(retrieval,) if retrieval == "nn" else ("nn", "csls"))
        ev = ev.assign(method=method, source=src.name, target=tgt.name, dictionary=dictionary, seed=seed)
        tables = {"precision": ev, "history": res.history}
        if dictionary == "identical":
            tables["most_moved"] = most_moved_words(src, tgt, res, k=top)
        run = out or paths.results_dir() / "align" / time.strftime("%Y%m%d-%H%M%S")
        from bertology.atomic import atomic_path

        with atomic_path(Path(run) / "W.npy") as tmp, open(tmp, "wb") as fh:
            np.save(fh, res.W)
        write_results(run, tables, {"analysis": "align", "source": source, "target": target,
                                    "dictionary": dictionary, "method": method, "seed": seed,
                                    "n_train_pairs": len(res.train_pairs), "n_test_sources": len(held_out)},
                      extras={"W_shape": list(res.W.shape)})
        typer.echo(ev.pivot(index="retrieval", columns="k", values="value").round(3).to_string())
        if "most_moved" in tables:
            typer.echo(tables["most_moved"].head(10).to_string(index=False))
        typer.echo(f"wrote {run}")
