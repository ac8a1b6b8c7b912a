"""Embedding spaces: static vectors (input embeddings, word2vec, distilled from contextual layers,
spaCy), contextuality (Ethayarajh 2019), static vs contextual neighbours and sense clusters, rotation
alignment (Procrustes, least squares, self-learning, NN / CSLS retrieval), FreeDict bilingual
dictionaries, and drift between layers, models, corpora and eras. The analyses as whole runs (a
config, a seed, tables, one manifest schema) are in :mod:`bertology.probes.embeddings.analysis`."""

from bertology.probes.embeddings.alignment import (
    AlignmentError,
    AlignmentResult,
    align,
    evaluate_alignment,
    identical_pairs,
    lstsq_map,
    most_moved_words,
    normalize_embeddings,
    procrustes,
    retrieve,
    self_learning,
)
from bertology.probes.embeddings.analysis import (
    ALIGN_SPACES_DEFAULTS,
    ALIGNMENT_DEFAULTS,
    CONTEXTUALITY_DEFAULTS,
    align_spaces_analysis,
    alignment_analysis,
    contextuality_analysis,
    load_space,
)
from bertology.probes.embeddings.contextuality import (
    MEV_CENTERINGS,
    contextuality,
    contextuality_by_word,
    intra_sentence_per_sentence,
    mev_per_group,
    random_groups,
    self_similarity_per_word,
    to_long,
)
from bertology.probes.embeddings.crosslingual import crosslingual_experiment
from bertology.probes.embeddings.dictionaries import (
    DictionaryError,
    bilingual_pairs,
    filter_to_vocab,
    read_freedict,
    split_dictionary,
)
from bertology.probes.embeddings.drift import compare_corpora, compare_spaces
from bertology.probes.embeddings.neighbours import sense_clusters, static_vs_contextual_neighbours
from bertology.probes.embeddings.static_vectors import (
    StaticVectors,
    VectorFileError,
    distill_static,
    load_spacy_vectors,
    read_word2vec,
    train_word2vec,
    unit_rows,
    word_vectors_from_pieces,
    write_word2vec,
)

__all__ = [
    "StaticVectors",
    "VectorFileError",
    "unit_rows",
    "read_word2vec",
    "write_word2vec",
    "word_vectors_from_pieces",
    "train_word2vec",
    "distill_static",
    "load_spacy_vectors",
    "contextuality",
    "contextuality_by_word",
    "self_similarity_per_word",
    "intra_sentence_per_sentence",
    "mev_per_group",
    "random_groups",
    "MEV_CENTERINGS",
    "to_long",
    "static_vs_contextual_neighbours",
    "sense_clusters",
    "AlignmentError",
    "AlignmentResult",
    "align",
    "procrustes",
    "lstsq_map",
    "normalize_embeddings",
    "retrieve",
    "self_learning",
    "evaluate_alignment",
    "identical_pairs",
    "most_moved_words",
    "DictionaryError",
    "read_freedict",
    "bilingual_pairs",
    "filter_to_vocab",
    "split_dictionary",
    "compare_corpora",
    "compare_spaces",
    "crosslingual_experiment",
    "CONTEXTUALITY_DEFAULTS",
    "contextuality_analysis",
    "ALIGNMENT_DEFAULTS",
    "alignment_analysis",
    "ALIGN_SPACES_DEFAULTS",
    "align_spaces_analysis",
    "load_space",
]
