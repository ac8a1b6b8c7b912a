"""``python -m bertology.finetuning [OPTIONS]`` is ``bertology finetune [OPTIONS]``: the same typer
command. It exists because torchrun starts a module, not a console script:
``torchrun --nproc_per_node N -m bertology.finetuning --task pos ...`` runs the command in every
process (DDP: gloo on CPU, nccl on GPU).

A launcher, not library code: it hands its command line to ``bertology.cli`` without importing it.
"""

import runpy
import sys

sys.argv[1:1] = ["finetune"]
runpy.run_module("bertology.cli", run_name="__main__")
