"""What fine-tuning changes (issue 28): the frozen / full / BitFit / adapters table on the same tasks
and test examples with intervals and paired comparisons against full fine-tuning; per-layer
relative weight change per module; per-layer CKA between the pretrained and the fine-tuned encoder
on held-out sentences; per-head change of attention. A thin layer over
:func:`bertology.finetuning.analysis.finetuning_analysis`."""

from __future__ import annotations

from bertology.finetuning.analysis import FINETUNING_DEFAULTS, finetuning_analysis

DESCRIPTION = ("Fine-tuning: frozen / full / BitFit / adapters with intervals and paired comparisons; "
               "weight change, CKA and attention change per layer")
DEFAULTS = FINETUNING_DEFAULTS
run = finetuning_analysis
