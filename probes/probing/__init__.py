"""Edge probing (Tenney et al. 2019): span tasks, joint per-layer / scalar-mix / cumulative probes,
expected layer, Hewitt & Liang control tasks and selectivity, Voita & Titov MDL, a random-encoder
baseline, a scikit-learn estimator and the BERT paper's layer combinations (Devlin et al. 2019,
Table 7).

Every public name is importable from here. They live in :mod:`.edge` (joint probes, runners,
summaries; implemented in the private ``_*`` modules it lists), :mod:`.tasks`, :mod:`.controls`,
:mod:`.mdl`, :mod:`.baselines` and :mod:`.combinations`. The analyses as whole runs (a config, a
seed, tables, one manifest schema) are in :mod:`bertology.probes.probing.analysis`."""

from bertology.probes.probing.analysis import (EDGE_PROBING_DEFAULTS, FEATURE_COMBINATIONS_DEFAULTS,
                                               combination_summary, corpus_for_task_file, edge_probing_analysis,
                                               feature_combinations_analysis, probe_settings)
from bertology.probes.probing.baselines import compare_probe_families, random_init_baseline
from bertology.probes.probing.combinations import (COMBINATIONS, all_combinations, combination_layers, combine,
                                                   combine_layers)
from bertology.probes.probing.controls import (CONTROL_KEYS, control_key_seen_share, control_keys, control_task,
                                               selectivity)
from bertology.probes.probing.edge import (INTERVAL_METRICS, SELECTED_ON, EdgeProbe, JointFit, JointProbes,
                                           ProbeConfig, SpanFeatures, classification_metrics, confidence_intervals,
                                           cumulative_deltas, cumulative_expected_layer, expected_layer, fit_joint,
                                           compare_best_layers, item_statistics, label_matrix, layer_differences,
                                           layer_features, layer_intervals,
                                           mixing_spec, pooled_features, predict_logits, probe_arrays, probe_layers,
                                           seed_and_sentence_interval, sentence_sums, span_index, summarise)
from bertology.probes.probing.mdl import block_boundaries, mdl_layers, online_codelength
from bertology.probes.probing.synthetic import PlantedData, planted_task
from bertology.probes.probing.tasks import (EdgeExample, EdgeTask, TaskError, build_task, deps_task, entities_task,
                                            label_distribution, pos_task, read_jsonl, split_by_sentence,
                                            write_jsonl, xpos_task)

__all__ = [
    "EdgeExample", "EdgeTask", "TaskError", "build_task", "pos_task", "xpos_task", "deps_task", "entities_task",
    "read_jsonl", "write_jsonl", "split_by_sentence", "label_distribution",
    "ProbeConfig", "SpanFeatures", "JointProbes", "JointFit", "EdgeProbe", "fit_joint", "predict_logits",
    "probe_arrays", "probe_layers", "layer_features", "label_matrix", "span_index", "mixing_spec",
    "classification_metrics", "expected_layer", "cumulative_deltas", "cumulative_expected_layer",
    "confidence_intervals", "summarise", "pooled_features", "INTERVAL_METRICS", "SELECTED_ON", "item_statistics",
    "layer_intervals", "seed_and_sentence_interval", "sentence_sums", "layer_differences", "compare_best_layers",
    "control_task", "control_keys", "control_key_seen_share", "CONTROL_KEYS", "selectivity",
    "compare_probe_families", "random_init_baseline",
    "COMBINATIONS", "combination_layers", "combine_layers", "combine", "all_combinations",
    "online_codelength", "mdl_layers", "block_boundaries", "PlantedData", "planted_task",
    "EDGE_PROBING_DEFAULTS", "edge_probing_analysis", "FEATURE_COMBINATIONS_DEFAULTS",
    "feature_combinations_analysis", "probe_settings", "corpus_for_task_file", "combination_summary",
]
