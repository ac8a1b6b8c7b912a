"""One entry point per embedding analysis: contextuality (Ethayarajh 2019), rotation alignment of
static spaces (the ``alignment`` study's experiments) and the alignment of any two spaces.

Each analysis is a function of a :class:`bertology.runs.StudyContext` with its config schema
(``*_DEFAULTS``). The studies (``bertology.studies.contextuality``, ``...alignment``,
``...align_spaces``) are these functions, and ``bertology embeddings`` / ``bertology align`` run
those studies with the options given, so a run has the one manifest schema of
:func:`bertology.runs.run_analysis` whichever way it started.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from bertology.corpus.plain_text import load_text
from bertology.errors import ConfigError, WorkbenchError
from bertology.probes.embeddings.alignment import align, identical_pairs, most_moved_words
from bertology.probes.embeddings.contextuality import MEV_CENTERINGS, contextuality, contextuality_by_word
from bertology.probes.embeddings.crosslingual import crosslingual_experiment
from bertology.probes.embeddings.dictionaries import bilingual_files, bilingual_pairs, filter_to_vocab, split_dictionary
from bertology.probes.embeddings.drift import compare_corpora, compare_spaces
from bertology.probes.embeddings.neighbours import sense_clusters, static_vs_contextual_neighbours
from bertology.probes.embeddings.static_vectors import (
    SPACY_PACKAGES,
    StaticVectors,
    distill_static,
    load_spacy_vectors,
    read_word2vec,
    spacy_vocab_dir,
    train_word2vec,
    word_vectors_from_pieces,
)
from bertology.runs import StudyContext, model_corpus_store, reads_inputs
from bertology.runtime import release_free_memory

if TYPE_CHECKING:
    from bertology.corpus.documents import SliceSpec
    from bertology.probes.embeddings.semantic_change import ChangeSettings

CONTEXTUALITY_DEFAULTS: dict[str, Any] = {
    "model": "minilm-l6",
    "corpus": "brown-sample",
    "limit": 3000,
    "pooling": "first",
    "min_occurrences": 5,
    "max_occurrences": 50,
    # MEV as Ethayarajh computes it: first principal component of the word's centred occurrence
    # matrix (PCA); "uncentred" = the raw matrix's σ1²/Σσi² (the workbench's earlier definition)
    "mev_centering": "centred",
    "words": [
        "state",
        "play",
        "light",
        "place",
        "right",
        "time",
        "part",
        "court",
        "interest",
        "field",
        "line",
        "order",
        "present",
        "point",
        "bank",
        "run",
    ],
    "min_word_occurrences": 8,
    "neighbours_k": 8,
    "n_clusters": 2,
    # also write static vectors (distilled from `export_layers`, word2vec on the corpus, input
    # embeddings) as word2vec text files vectors-<source>.txt into the run directory
    "export_vectors": False,
    "export_layers": [0, -1],
    "device": "cpu",  # where the model runs (the store is extracted there): cpu, cuda, cuda:N or auto
    "seed": 0,
}

ALIGNMENT_DEFAULTS: dict[str, Any] = {
    "crosslingual": True,
    "source": "en",
    "target": "fr",
    "dictionary": ["eng", "fra"],
    "dictd_dir": "",  # folder of the FreeDict dictd files ("" = $BERTOLOGY_DICTD_DIR or /usr/share/dictd)
    "methods": ["procrustes", "lstsq", "self-learning:identical", "self-learning:numerals"],
    "n_train": 5000,
    "n_test_sources": 1500,
    "vocab_cutoff": 20000,
    "max_iter": 30,
    "model": "minilm-l6",
    "corpus": "brown-sample",
    "limit": 3000,
    "pooling": "first",
    "layer_pair": [1, -1],
    "other_model": "",
    "corpora": ["kjv", "brown"],
    "top_moved": 30,
    "drift_min_count": 50,
    "seed": 0,
}

ALIGN_SPACES_DEFAULTS: dict[str, Any] = {
    "source": "spacy:en",  # word2vec text file, spacy:en|fr, or store:<dir>:<layer>
    "target": "spacy:fr",
    # FreeDict pair (eng-fra, eng-spa, eng-deu) or "identical" (same vocabulary: two layers,
    # corpora or models)
    "dictionary": "eng-fra",
    "dictd_dir": "",  # folder of the FreeDict dictd files ("" = $BERTOLOGY_DICTD_DIR or /usr/share/dictd)
    "method": "procrustes",  # procrustes | lstsq | self-learning
    "retrieval": "csls",  # nn | csls (csls also reports nn)
    "seed_dictionary": "identical",  # self-learning seed: identical | numerals
    "n_train": 5000,  # training pairs (supervised methods)
    "n_test": 1500,  # held-out source words
    "normalization": "unit-center-unit",  # none | unit | center | unit-center-unit
    "top": 20,  # most-moved words listed ("identical" dictionary)
    "seed": 0,
}


# --- what an alignment run reads (its run id hashes it) -----------------------------------------

SPACY_VECTOR_FILES = ("vectors", "key2row", "strings.json")  # what load_spacy_vectors reads


def spacy_vectors_digest(lang_or_path: str) -> dict[str, str]:
    """Fingerprint of a spaCy vector table (``en``, ``fr`` or a pipeline folder): the package's name
    and version and the sha256 of the files :func:`load_spacy_vectors` reads (cached by path, size,
    mtime: a 40 MB table is read once)."""
    from importlib import metadata

    from bertology.fingerprints import files_input_digest

    vocab = spacy_vocab_dir(lang_or_path)
    package = SPACY_PACKAGES[lang_or_path][0] if lang_or_path in SPACY_PACKAGES else Path(lang_or_path).name
    try:
        version = metadata.version(package)
    except metadata.PackageNotFoundError:
        version = ""  # a pipeline folder outside any installed package: its files decide
    return files_input_digest("vector package", [vocab / f for f in SPACY_VECTOR_FILES], name=package, version=version)


def dictionary_digest(source_lang: str, target_lang: str, directory: str | None) -> dict[str, str]:
    """Fingerprint of the FreeDict files :func:`bilingual_pairs` reads for a language pair (and its
    reverse when installed)."""
    from bertology.fingerprints import files_input_digest

    return files_input_digest(
        "dictionary",
        bilingual_files(source_lang, target_lang, directory=directory or None),
        name=f"freedict {source_lang}-{target_lang}",
    )


def space_digest(spec: str) -> dict[str, str] | None:
    """Fingerprint of a :func:`load_space` spec that names no file itself: ``spacy:<lang>`` (the
    vector package) and ``store:<dir>:<layer>`` (the store's manifest, which holds a sha256 per
    shard and the corpus fingerprint). A word2vec file is hashed by the generic config fingerprints."""
    from bertology.fingerprints import files_input_digest

    if spec.startswith("spacy:"):
        return spacy_vectors_digest(spec.split(":", 1)[1])
    if spec.startswith("store:"):
        store_dir = spec[len("store:") :].rpartition(":")[0]
        return files_input_digest("feature store", [Path(store_dir) / "manifest.json"])
    return None


def alignment_inputs(config: dict[str, Any]) -> dict[str, Any]:
    """Vector packages and dictionaries of the ``alignment`` study's cross-lingual experiment, and
    the plain-text corpora its drift experiment reads."""
    from bertology.corpus.plain_text import text_files
    from bertology.fingerprints import files_input_digest

    out: dict[str, Any] = {}
    if config["crosslingual"]:
        source, target = config["source"], config["target"]
        out.update(
            source_vectors=spacy_vectors_digest(source),
            target_vectors=spacy_vectors_digest(target),
            dictionary_files=dictionary_digest(config["dictionary"][0], config["dictionary"][1], config["dictd_dir"]),
        )
    for name in config.get("corpora") or []:
        out[f"text_{name}"] = files_input_digest("plain text", text_files(name), name=name)
    return out


def align_spaces_inputs(config: dict[str, Any]) -> dict[str, Any]:
    """Vector packages / stores and the dictionary of an ``align_spaces`` run."""
    out = {f"{side}_vectors": space_digest(config[side]) for side in ("source", "target")}
    if config["dictionary"] != "identical" and config["dictionary"].count("-") == 1:
        source_lang, target_lang = config["dictionary"].split("-")
        out["dictionary_files"] = dictionary_digest(source_lang, target_lang, config["dictd_dir"])
    return {k: v for k, v in out.items() if v is not None}


# --- spaces -------------------------------------------------------------------------------------


def load_space(spec: str, lower: bool = True) -> StaticVectors:
    """A ``StaticVectors`` from ``spacy:en`` / ``spacy:fr``, ``store:<dir>:<layer>`` (distilled mean
    of a feature store layer) or a word2vec text file path."""
    if spec.startswith("spacy:"):
        return load_spacy_vectors(spec.split(":", 1)[1])
    if spec.startswith("store:"):
        from bertology.store import open_store

        body = spec[len("store:") :]
        path, _, layer = body.rpartition(":")
        if not path or not layer.lstrip("-").isdigit():
            raise WorkbenchError(f"{spec!r}: use store:<store dir>:<layer number>")
        store = open_store(path)
        words = _store_words(store)
        # the layer streamed shard by shard (never whole in memory)
        return distill_static(store.view([int(layer)]), words, lower=lower, name=f"{Path(path).name}@{layer}")
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


# --- contextuality ------------------------------------------------------------------------------


def contextuality_analysis(ctx: StudyContext) -> None:
    """Static vs contextual (Ethayarajh 2019): self-similarity, intra-sentence similarity and MEV per
    layer with anisotropy baselines, per-word contextuality, static vs contextual neighbours of
    polysemous words and their sense clusters.

    Tables: ``contextuality`` (per layer and metric: raw, baseline, adjusted, the number of items and
    the occurrences per word the word-level figures rest on; MEV centred unless ``mev_centering``
    says otherwise), ``contextuality_by_word``, ``neighbours``, ``sense_clusters`` and,
    with ``export_vectors``, ``static_sources`` (source, n_words, dim, file) beside the
    ``vectors-<source>.txt`` files it lists.
    """
    cfg = ctx.config
    lm, corpus, store = model_corpus_store(ctx)
    layers = store.view()  # read shard by shard and row block by row block: no layer is ever whole in memory
    words = corpus.flat_words()
    lowered = np.array([w.lower() for w in words])
    offsets = store.sentence_offsets

    if cfg["mev_centering"] not in MEV_CENTERINGS:
        raise ConfigError(f"mev_centering must be one of {', '.join(MEV_CENTERINGS)}, got {cfg['mev_centering']!r}")
    ctx.step(
        "contextuality",
        lambda: contextuality(
            layers,
            words,
            offsets,
            min_occurrences=cfg["min_occurrences"],
            max_occurrences=cfg["max_occurrences"],
            seed=ctx.seed,
            mev_centering=cfg["mev_centering"],
        ),
    )
    ctx.step(
        "contextuality_by_word",
        lambda: contextuality_by_word(
            layers,
            words,
            offsets,
            min_occurrences=cfg["min_occurrences"],
            max_occurrences=cfg["max_occurrences"],
            seed=ctx.seed,
            mev_centering=cfg["mev_centering"],
        ),
    )
    chosen = [w for w in cfg["words"] if (lowered == w).sum() >= cfg["min_word_occurrences"]]
    ctx.record(polysemous_words=chosen)
    last = store.n_layers - 1
    release_free_memory()  # what the per-layer steps freed goes back before the next steps
    last_layer = store.view([last])  # read when used: the distilled means shard by shard, the chosen words' rows

    def neighbours() -> pd.DataFrame:
        types, counts = np.unique(lowered, return_counts=True)  # on the fixed-width array: no str per word
        vocab = sorted(str(w) for w in types[counts >= 3])
        statics = {
            "input embeddings": word_vectors_from_pieces(lm.encoder, lm.tokenizer, vocab),
            f"distilled layer {last}": distill_static(last_layer, words, name=f"distilled@{last}"),
        }
        frames = []
        for word in chosen:
            for name, static in statics.items():
                df = static_vs_contextual_neighbours(word, static, last_layer, words, offsets, k=cfg["neighbours_k"])
                frames.append(df.assign(word=word, static_space=name))
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    ctx.step("neighbours", neighbours)

    def clusters() -> pd.DataFrame:
        frames = [
            sense_clusters(w, last_layer, words, offsets, n_clusters=cfg["n_clusters"], seed=ctx.seed).assign(
                word=w, layer=last
            )
            for w in chosen
        ]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    ctx.step("sense_clusters", clusters)

    if cfg["export_vectors"]:

        def export() -> pd.DataFrame:
            spaces: dict[str, StaticVectors] = {}
            for l in cfg["export_layers"]:
                li = int(l) % len(layers)
                spaces[f"distilled@{li}"] = distill_static(store.view([li]), words, name=f"distilled@{li}")
            sentences = [lowered[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]
            spaces["word2vec"] = train_word2vec(
                sentences, dim=100, min_count=min(5, cfg["min_occurrences"]), seed=ctx.seed
            )
            spaces["input"] = word_vectors_from_pieces(
                lm.encoder, lm.tokenizer, sorted(set(lowered.tolist())), name="input"
            )
            rows = []
            for name, vectors in spaces.items():
                path = vectors.save_word2vec(ctx.run_dir / f"vectors-{name.replace('@', '-')}.txt")
                rows.append({"source": name, "n_words": len(vectors), "dim": vectors.dim, "file": Path(path).name})
            return pd.DataFrame(rows)

        ctx.step("static_sources", export)


# --- the alignment study's experiments ----------------------------------------------------------


@reads_inputs(alignment_inputs)
def alignment_analysis(ctx: StudyContext) -> None:
    """Rotation alignment "solved exactly with SVD": English→French static vectors with FreeDict
    dictionaries (Procrustes, least squares, self-learning; NN vs CSLS), two layers of one model,
    two models, and one language in two eras.

    Tables: ``precision_crosslingual``, ``translations``, ``history``, ``dictionary``,
    ``method_comparison`` (if ``crosslingual``), ``moved_layers``, ``moved_models`` (if ``other_model``), ``moved_corpora``
    (if ``corpora``), and the combined ``precision`` and ``most_moved``.
    """
    cfg = ctx.config
    precision, moved = [], []
    if cfg["crosslingual"]:

        def cross() -> dict[str, pd.DataFrame]:
            tables = crosslingual_experiment(
                cfg["source"],
                cfg["target"],
                tuple(cfg["dictionary"]),
                methods=cfg["methods"],
                n_train=cfg["n_train"],
                n_test_sources=cfg["n_test_sources"],
                vocab_cutoff=cfg["vocab_cutoff"],
                max_iter=cfg["max_iter"],
                seed=ctx.seed,
                dictd_dir=cfg["dictd_dir"],
            )
            experiment = f"{cfg['source']}→{cfg['target']}"
            return {
                "precision_crosslingual": tables["precision"].assign(experiment=experiment),
                **{
                    name: tables[name].assign(experiment=experiment)
                    for name in ("translations", "history", "dictionary", "method_comparison")
                },
            }

        made = ctx.steps(
            ["precision_crosslingual", "translations", "history", "dictionary", "method_comparison"], cross
        )
        precision.append(made["precision_crosslingual"])

    _, corpus, store = model_corpus_store(ctx)
    words = [w.lower() for w in corpus.flat_words()]

    def layers() -> pd.DataFrame:
        a, b = [l % store.n_layers for l in cfg["layer_pair"]]
        va = distill_static(store.view([a]), words, name=f"layer {a}")  # each layer streamed shard by shard
        vb = distill_static(store.view([b]), words, name=f"layer {b}")
        res = compare_spaces(va, vb, top=cfg["top_moved"], seed=ctx.seed)
        return res["most_moved"].assign(experiment=f"{store.manifest['model']['name']}: layer {a} vs layer {b}")

    moved.append(ctx.step("moved_layers", layers))

    if cfg["other_model"]:

        def models() -> pd.DataFrame:
            from bertology.models import load_model
            from bertology.store import extract

            other = extract(load_model(cfg["other_model"]), corpus, attentions=False)
            last = store.n_layers - 1
            va = distill_static(store.view([last]), words, name=store.manifest["model"]["name"])
            vb = distill_static(other.view([other.n_layers - 1]), words, name=cfg["other_model"])
            res = compare_spaces(va, vb, top=cfg["top_moved"], seed=ctx.seed)
            return res["most_moved"].assign(experiment=f"{va.name} vs {vb.name} (last layers)")

        moved.append(ctx.step("moved_models", models))

    if cfg["corpora"]:

        def eras() -> pd.DataFrame:
            try:
                a, b = (load_text(name) for name in cfg["corpora"])
            except WorkbenchError as exc:
                ctx.log(f"    skipped two-corpora drift: {exc}")
                return pd.DataFrame()
            res = compare_corpora(
                a, b, top=cfg["top_moved"], seed=ctx.seed, names=tuple(cfg["corpora"]), min_count=cfg["drift_min_count"]
            )
            return res["most_moved"].assign(experiment=f"{cfg['corpora'][0]} vs {cfg['corpora'][1]} (word2vec)")

        moved.append(ctx.step("moved_corpora", eras))

    ctx.step("precision", lambda: pd.concat(precision, ignore_index=True) if precision else pd.DataFrame())
    ctx.step("most_moved", lambda: pd.concat([m for m in moved if len(m)], ignore_index=True))


# --- any two spaces -----------------------------------------------------------------------------


@reads_inputs(align_spaces_inputs)
def align_spaces_analysis(ctx: StudyContext) -> None:
    """Align two vector spaces (``source`` → ``target``, see :func:`load_space`) with a rotation,
    least squares or self-learning, and score word translation P@1/5/10 on held-out source words
    over the whole target vocabulary.

    Tables: ``precision`` (retrieval, k, value, ... method, source, target, dictionary, seed),
    ``history`` (the method's iterations) and, with the ``identical`` dictionary, ``most_moved``.
    The map is saved as ``W.npy``; pair counts and the spaces' names go to the extra ``alignment``
    and the manifest.
    """
    from bertology.atomic import atomic_path

    cfg = ctx.config
    dictionary, method, retrieval = cfg["dictionary"], cfg["method"], cfg["retrieval"]
    if retrieval not in ("nn", "csls"):
        raise ConfigError(f"retrieval must be nn or csls, not {retrieval!r}")
    if dictionary != "identical" and dictionary.count("-") != 1:
        raise ConfigError(f"dictionary {dictionary!r}: use e.g. eng-fra or identical")
    names = ["precision", "history"] + (["most_moved"] if dictionary == "identical" else [])
    info: dict[str, Any] = {}

    def compute() -> dict[str, pd.DataFrame]:
        src, tgt = load_space(cfg["source"]), load_space(cfg["target"])
        if dictionary == "identical":
            pairs = identical_pairs(src, tgt)
        else:
            a, b = dictionary.split("-")
            pairs = filter_to_vocab(bilingual_pairs(a, b, directory=cfg["dictd_dir"] or None), src.words, tgt.words)
        train, test = split_dictionary(
            pairs,
            n_test_sources=min(cfg["n_test"], pairs["source"].nunique() // 2),
            n_train=cfg["n_train"],
            seed=ctx.seed,
        )
        held_out = set(test["source"])
        res = align(
            src,
            tgt,
            None if method == "self-learning" else train,
            method=method,
            normalization=cfg["normalization"],
            seed_dictionary=cfg["seed_dictionary"],
            exclude_from_seed=held_out,
        )
        ev = res.evaluate(src, tgt, test, retrieval=(retrieval,) if retrieval == "nn" else ("nn", "csls"))
        ev = ev.assign(method=method, source=src.name, target=tgt.name, dictionary=dictionary, seed=ctx.seed)
        tables = {"precision": ev, "history": res.history}
        if dictionary == "identical":
            tables["most_moved"] = most_moved_words(src, tgt, res, k=cfg["top"])
        with atomic_path(ctx.run_dir / "W.npy") as tmp, open(tmp, "wb") as fh:
            np.save(fh, res.W)
        info.update(
            source_space={"name": src.name, "words": len(src), "dim": src.dim},
            target_space={"name": tgt.name, "words": len(tgt), "dim": tgt.dim},
            n_train_pairs=len(res.train_pairs),
            n_test_sources=len(held_out),
            W_shape=list(res.W.shape),
        )
        return tables

    ctx.steps(names, compute)
    ctx.record(**ctx.extra("alignment", lambda: info))


__all__ = [
    "CONTEXTUALITY_DEFAULTS",
    "ALIGNMENT_DEFAULTS",
    "ALIGN_SPACES_DEFAULTS",
    "contextuality_analysis",
    "alignment_analysis",
    "align_spaces_analysis",
    "load_space",
    "alignment_inputs",
    "align_spaces_inputs",
    "spacy_vectors_digest",
    "dictionary_digest",
    "space_digest",
    "SEMANTIC_CHANGE_DEFAULTS",
    "semantic_change_analysis",
    "semantic_change_inputs",
]


# --- semantic change between slices of documents ------------------------------------------------

SEMANTIC_CHANGE_DEFAULTS: dict[str, Any] = {
    "documents": "sotu",  # sotu (State of the Union, scripts/setup.sh --with-pretraining-corpus) | a folder
    "comparisons": {  # name -> {a: slice, b: slice}; a slice: years [first, last] and/or field values
        "1900s_vs_1990s": {"a": {"years": [1900, 1929]}, "b": {"years": [1990, 2021]}},
        "democratic_vs_republican": {
            "a": {"years": [1950, 2021], "party": "Democratic"},
            "b": {"years": [1950, 2021], "party": "Republican"},
        },
    },
    "space": "word2vec",  # word2vec | contextual (mean contextual vector of a word per slice)
    "model": "minilm-l6",  # contextual: the encoder
    "contextual_layer": -1,
    "contextual_max_sentences": 40,  # contextual: the first N sentences of each document
    "vector_dim": 100,  # word2vec (skip-gram)
    "vector_window": 5,
    "vector_epochs": 5,
    "replicates": 10,  # document bootstraps (word2vec: each with its own seed)
    "control_replicates": 3,  # random halves of each slice
    "min_count": 20,  # scored words: at least this often in both slices
    "anchors": 2000,  # Procrustes anchors: the most frequent shared words
    "tested": [],  # words under test (always a row; scored where min_count holds; with exclude_tested not anchors)
    "exclude_tested": False,
    "neighbourhood_k": 10,  # Hamilton et al. (2016b) second-order measure
    "neighbourhood_centred": False,  # False: unit vectors, as histwords; True: centred on the anchors' mean first
    "control": "word",  # word: each word's own split-half scores | bin: its frequency bin's pooled scores
    "frequency_bins": 5,
    "control_quantile": 0.95,  # 1 - family-wise level (control word: over a comparison; bin: within a bin)
    "top": 30,  # most moved / most stable words printed per comparison
    "seed": 0,
}


def semantic_change_inputs(config: dict[str, Any]) -> dict[str, Any]:
    """The documents folder's files (texts and metadata sidecars): a changed address is a new run."""
    from bertology.corpus.documents import refuse_outside, sotu_folder
    from bertology.fingerprints import files_input_digest

    folder = sotu_folder() if config["documents"] == "sotu" else Path(config["documents"]).expanduser()
    files = sorted(p for p in folder.glob("*") if p.suffix in (".txt", ".json")) if folder.is_dir() else []
    if not files:
        raise ConfigError(f"documents: {folder} holds no .txt documents")
    for path in files:  # a link out of the folder is neither read nor hashed
        refuse_outside(path, folder, "documents")
    return {"documents": files_input_digest("documents", files, name=config["documents"])}


def _slice_builder(ctx: StudyContext, docs: list, name: str, lm: Any = None):
    """``(builder, word counts, sentences)`` of one slice in the configured kind of space."""
    from collections import Counter

    from bertology.corpus.documents import slice_sentences
    from bertology.probes.embeddings.semantic_change import contextual_builder, word2vec_builder, word_counts

    cfg = ctx.config
    sentences = slice_sentences(docs)
    if cfg["space"] == "word2vec":
        return (
            word2vec_builder(
                sentences,
                dim=cfg["vector_dim"],
                window=cfg["vector_window"],
                epochs=cfg["vector_epochs"],
                min_count=5,
                name=name,
            ),
            word_counts(sentences),
            sentences,
        )
    kept = [doc[: cfg["contextual_max_sentences"]] for doc in sentences]
    sums, counts = _document_sums(lm, kept, cfg["contextual_layer"], name)
    return contextual_builder(sums, counts, min_count=5, name=name), sum(counts, Counter()), kept


def _document_sums(lm: Any, sentences: list, layer: int, name: str):
    """Per document, the sum of each word's contextual vectors at ``layer`` and its occurrences
    (one extraction of the slice's sentences through the feature store, read back a sentence at a
    time: the layer is never whole in memory)."""
    from collections import Counter

    from bertology.corpus import Corpus, Sentence
    from bertology.store import extract

    flat = [Sentence(f"{name}-{d}-{i}", list(s)) for d, doc in enumerate(sentences) for i, s in enumerate(doc)]
    store = extract(lm, Corpus(name, flat), attentions=False, progress=True)
    sums: list[dict[str, np.ndarray]] = [dict() for _ in sentences]
    counts: list[Counter] = [Counter() for _ in sentences]
    for i, sentence in enumerate(flat):
        doc = int(sentence.sent_id.rsplit("-", 2)[1])
        vectors = store.hidden(i, [layer])[0]  # [words_i, dim]: corpus order, so the same sums as the whole layer's
        for word, vector in zip(sentence.words, vectors):
            v = vector.astype(np.float64)
            sums[doc][word] = sums[doc][word] + v if word in sums[doc] else v
            counts[doc][word] += 1
    return sums, counts


@reads_inputs(semantic_change_inputs)
def semantic_change_analysis(ctx: StudyContext) -> None:
    """Words that moved between two slices of documents ("1900 vs 1990", "left vs right"): per
    comparison, word2vec (or type-level contextual) spaces of each slice, Procrustes cosine distance
    and Hamilton et al.'s neighbourhood measure over document-bootstrap replicates, and a
    control from random halves of each slice: each word against its own split-half scores
    (:func:`bertology.probes.embeddings.semantic_change.semantic_change`; docs/METHODS.md,
    "Semantic change").

    Tables: ``slices`` (``comparison, side, slice, documents, sentences, words, vocabulary``),
    ``word_change`` (every scored word of every comparison: :data:`~bertology.probes.embeddings.semantic_change.CHANGE_COLUMNS`,
    most moved first; ``status`` says why a word was not tested, e.g. a word of ``tested`` below
    ``min_count``), ``control`` (per comparison and frequency bin: the control's threshold, level,
    median and maximum), ``control_scores`` (every split-half score per word) and ``replicates``
    (every replicate's score per word).
    """
    from bertology.corpus.documents import SliceSpec, load_documents, select_documents
    from bertology.models import load_model

    cfg = ctx.config
    _check_semantic_change_options(cfg)
    docs = load_documents(cfg["documents"])
    specs = {
        name: (SliceSpec.from_config(f"{name}.a", c["a"]), SliceSpec.from_config(f"{name}.b", c["b"]))
        for name, c in cfg["comparisons"].items()
    }
    chosen = {name: (select_documents(docs, a), select_documents(docs, b)) for name, (a, b) in specs.items()}
    lm = load_model(cfg["model"]) if cfg["space"] == "contextual" else None
    settings = _change_settings(cfg, ctx.seed)
    tables = ctx.steps(
        ["slices", "word_change", "control", "control_scores", "replicates"],
        lambda: _semantic_change_tables(ctx, specs, chosen, lm, settings),
    )
    ctx.record(slices=tables["slices"].to_dict("records"), space=cfg["space"])
    _log_most_moved(ctx, tables["word_change"], cfg["top"])


def _check_semantic_change_options(cfg: dict[str, Any]) -> None:
    """Refuse an unknown ``space`` or ``control``, or ``comparisons`` not of the form name -> {a, b}."""
    if cfg["space"] not in ("word2vec", "contextual"):
        raise ConfigError(f"space must be word2vec or contextual, got {cfg['space']!r}")
    if cfg["control"] not in ("word", "bin"):
        raise ConfigError(f"control must be word or bin, got {cfg['control']!r}")
    comparisons = cfg["comparisons"]
    if (
        not isinstance(comparisons, dict)
        or not comparisons
        or not all(isinstance(c, dict) and set(c) == {"a", "b"} for c in comparisons.values())
    ):
        raise ConfigError("comparisons: a mapping of name -> {a: slice, b: slice}")


def _change_settings(cfg: dict[str, Any], seed: int) -> ChangeSettings:
    """The :class:`~bertology.probes.embeddings.semantic_change.ChangeSettings` of the study's config."""
    from bertology.probes.embeddings.semantic_change import ChangeSettings

    return ChangeSettings(
        replicates=cfg["replicates"],
        control_replicates=cfg["control_replicates"],
        min_count=cfg["min_count"],
        anchors=cfg["anchors"],
        exclude_tested=bool(cfg["exclude_tested"]),
        tested=tuple(cfg["tested"]),
        k=cfg["neighbourhood_k"],
        neighbourhood_centred=bool(cfg["neighbourhood_centred"]),
        control=cfg["control"],
        frequency_bins=cfg["frequency_bins"],
        control_quantile=cfg["control_quantile"],
        seed=seed,
    )


def _semantic_change_tables(
    ctx: StudyContext,
    specs: dict[str, tuple[SliceSpec, SliceSpec]],
    chosen: dict[str, tuple[list, list]],
    lm: Any,
    settings: ChangeSettings,
) -> dict[str, pd.DataFrame]:
    """Per comparison: the two slices' spaces and the semantic-change scores between them; the tables
    ``slices``, ``word_change``, ``control``, ``control_scores`` and ``replicates`` over every comparison."""
    from bertology.probes.embeddings.semantic_change import semantic_change

    slices, changes, controls, control_scores, replicates = [], [], [], [], []
    for name, (docs_a, docs_b) in chosen.items():
        ctx.log(
            f"  {name}: {specs[name][0].describe()} ({len(docs_a)} documents) vs "
            f"{specs[name][1].describe()} ({len(docs_b)} documents)"
        )
        built = [_slice_builder(ctx, d, f"{name}.{side}", lm) for d, side in ((docs_a, "a"), (docs_b, "b"))]
        for (_, counts, sentences), side, d in zip(built, "ab", (docs_a, docs_b)):
            slices.append(
                {
                    "comparison": name,
                    "side": side,
                    "slice": specs[name]["ab".index(side)].describe(),
                    "documents": len(d),
                    "sentences": sum(len(x) for x in sentences),
                    "words": sum(counts.values()),
                    "vocabulary": len(counts),
                }
            )
        result = semantic_change(
            built[0][0],
            built[1][0],
            built[0][1],
            built[1][1],
            (len(docs_a), len(docs_b)),
            settings,
            comparison=name,
            progress=ctx.log,
        )
        changes.append(result["word_change"])
        controls.append(result["control"])
        control_scores.append(result["control_scores"])
        replicates.append(result["replicates"])
    return {
        "slices": pd.DataFrame(slices),
        "word_change": pd.concat(changes, ignore_index=True),
        "control": pd.concat(controls, ignore_index=True),
        "control_scores": pd.concat(control_scores, ignore_index=True),
        "replicates": pd.concat(replicates, ignore_index=True),
    }


def _log_most_moved(ctx: StudyContext, word_change: pd.DataFrame, top: int) -> None:
    """Log per comparison how many tested words moved beyond the control, the ``top`` most moved, and
    (with the reason) the first ``top`` words not tested."""
    from bertology.probes.embeddings.semantic_change import SCORED

    shown = [
        "word",
        "count_a",
        "count_b",
        "cosine_distance",
        "low",
        "high",
        "control_threshold",
        "moved",
        "neighbours_a",
        "neighbours_b",
    ]
    for name, part in word_change.groupby("comparison", sort=False):
        tested = part[part["status"] == SCORED]
        ctx.log(f"\n{name}: {int(tested['moved'].sum())} of {len(tested)} words moved beyond the control; most moved:")
        ctx.log(tested.head(top)[shown].round(3).to_string(index=False))
        untested = part[part["status"] != SCORED]
        if len(untested):
            ctx.log(f"  {len(untested)} words not tested (column status), e.g.:")
        for row in untested.head(top).itertuples():
            ctx.log(f"  {row.word}: {row.status}")
