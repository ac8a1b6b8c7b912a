"""Fine-tuning pretrained encoders on labelled tasks, on the pretraining loop
(:func:`bertology.pretraining.loop.run_steps`): token, sentence and sentence-pair classification;
full fine-tuning, a frozen encoder, BitFit and Houlsby adapters; the lectures' recipe as defaults.
Run ``bertology finetune --model minilm-l6 --task pos`` (``python -m bertology.finetuning ...``
under torchrun: the same command).

Modules: ``config`` (``FinetuneConfig``), ``tasks`` (built-in and file tasks, split by document),
``data`` (sub-word encoding, first-sub-word labels, batches), ``heads`` (the classifier models),
``modes`` (full / frozen / BitFit / adapters), ``trainer`` (``run_finetuning``), ``finished`` (a finished
run reloaded for analysis: classifier, task, splits), ``changes`` (weight
change, layer CKA, attention change), ``analysis`` (the ``finetuning`` study: what fine-tuning changes).

Public API (imported lazily so that ``import bertology.finetuning`` stays light)::

    from bertology.finetuning import FinetuneConfig, run_finetuning, build_task
"""

from __future__ import annotations

__all__ = [
    "FinetuneConfig",
    "run_finetuning",
    "build_task",
    "apply_mode",
    "FinetuneTask",
    "Example",
    "FinishedFinetune",
    "load_finished_finetune",
]

_HOMES = {
    "FinetuneConfig": "config",
    "run_finetuning": "trainer",
    "build_task": "tasks",
    "apply_mode": "modes",
    "FinetuneTask": "tasks",
    "Example": "tasks",
    "FinishedFinetune": "finished",
    "load_finished_finetune": "finished",
}


def __getattr__(name: str):
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
