"""The tour: every analysis of the workbench on the embedded default (MiniLM-L6 + the bundled Brown
sample) at the larger sizes of ``configs/tour/`` (about 10 minutes on 2 CPU cores), each as its own
study run ``tour-seed<seed>``: head types, edge probing with random-encoder baselines, feature
combinations, contextuality, pruning of MiniLM's POS head, emergence, alignment (with the model and
corpus comparisons) and fine-tuning; head types and MLM pruning again on the workbench's English MLM
(``tour-minilm-english-mlm-seed<seed>``). The figures of the README's "The tour" section come from it.
Runs exactly as :mod:`bertology.studies.quickstart` does, with more studies at larger sizes.
"""

from __future__ import annotations

from bertology.studies.quickstart import run

DESCRIPTION = "Every analysis on the embedded default at the README's tour sizes (~10 minutes on 2 cores)"
DEFAULTS = {
    "studies": [
        "head_types",
        "edge_probing",
        "feature_combinations",
        "contextuality",
        "pruning",
        "emergence",
        "alignment",
        "finetuning",
    ],
    "configs": "tour",  # the shipped config variant (studies/configs/tour/)
    "second_model": "minilm-english-mlm",  # run `second_model_studies` again with this model ("" = skip)
    "second_model_studies": ["head_types", "pruning"],
    "seed": 0,
}

__all__ = ["DESCRIPTION", "DEFAULTS", "run"]
