"""Attention heads: statistics and types (Voita et al. 2019; Clark et al. 2019), attention-based
dependency probes, head gates (hooks: transformers 5 has no ``head_mask``), importance (Michel et al.
2019), pruning curves, real head removal and L0 gates.

One function per result table, for notebooks: :func:`head_types`, :func:`head_stats`,
:func:`head_dependency`, :func:`best_head_per_relation` (each ``(store, corpus)``).

Whole runs: :func:`head_types_analysis` and :func:`pruning_analysis` (``bertology.probes.heads.analysis``),
what the studies and the CLI commands ``heads`` / ``prune`` run."""

from bertology.probes.heads.analysis import (HEAD_TYPES_DEFAULTS, PRUNING_DEFAULTS, head_types_analysis,
                                             pruning_analysis)
from bertology.probes.heads.attention_probe import (AttentionDependencyProbe, WordAwareDependencyProbe,
                                                    attention_probe, best_heads, distance_features)
from bertology.probes.heads.gates import (AttentionBlock, FFNGates, HeadGates, attention_blocks, count_parameters,
                                          describe_pruning, gates_from_heads, head_shape, iter_heads, kept_heads,
                                          load_pruned, prune_heads, real_pruning_refusal, save_pruned)
from bertology.probes.heads.classification import (DEPENDENT_TO_HEAD, HEAD_TO_DEPENDENT, VOITA_RELATIONS, analyse_store,
                                               argmax_other_word, canonical_relation, classify_heads,
                                               dependency_scores, heads_across_checkpoints, type_matrix)
from bertology.probes.heads.importance import (TaggingHead, ablation_importance, ffn_importance_scores, importance_scores, mask_batches,
                                               mlm_loss, model_inputs, normalise_per_layer, tagging_batches,
                                               train_tagging_head)
from bertology.probes.heads.pruning import (HardConcreteGates, heads_dict, heads_pruned_at, measure_pruning,
                                            pos_task, pruning_curve, removable_shares, train_l0_gates,
                                            evaluate_l0_gates)
from bertology.probes.heads.tables import best_head_per_relation, head_dependency, head_stats, head_types
from bertology.probes.heads.stats import (HeadStatistics, corpus_frequencies, head_statistics, statistic_matrix,
                                          wordfreq_frequency)

__all__ = [
    "head_types", "head_stats", "head_dependency", "best_head_per_relation",
    "HeadStatistics", "head_statistics", "statistic_matrix", "corpus_frequencies", "wordfreq_frequency",
    "dependency_scores", "classify_heads", "type_matrix", "analyse_store", "heads_across_checkpoints",
    "canonical_relation", "VOITA_RELATIONS", "DEPENDENT_TO_HEAD", "HEAD_TO_DEPENDENT", "argmax_other_word",
    "attention_probe", "best_heads", "AttentionDependencyProbe",
    "WordAwareDependencyProbe", "distance_features", "HeadGates", "FFNGates", "ffn_importance_scores", "AttentionBlock", "attention_blocks",
    "head_shape", "kept_heads", "gates_from_heads", "prune_heads", "count_parameters", "save_pruned",
    "load_pruned", "real_pruning_refusal", "describe_pruning", "iter_heads", "importance_scores", "ablation_importance",
    "normalise_per_layer", "model_inputs", "mask_batches", "mlm_loss", "tagging_batches", "TaggingHead",
    "train_tagging_head", "pruning_curve", "heads_pruned_at", "heads_dict", "measure_pruning",
    "HardConcreteGates", "train_l0_gates", "evaluate_l0_gates", "pos_task", "removable_shares",
    "HEAD_TYPES_DEFAULTS", "head_types_analysis", "PRUNING_DEFAULTS", "pruning_analysis",
]
