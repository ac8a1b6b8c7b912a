"""``python -m bertology.pretraining [OPTIONS]`` is ``bertology pretrain [OPTIONS]``: the same typer
command, options, output and errors. It exists because torchrun starts a module, not a console
script: ``torchrun --nproc_per_node N -m bertology.pretraining --config FILE`` runs the command in
every process (DDP: gloo on CPU, nccl on GPU).

This is a launcher, not library code: it hands its command line to the ``bertology`` command line
(``bertology.cli``, where ``pretrain`` is defined) without importing it into the library.
"""

import runpy
import sys

sys.argv[1:1] = ["pretrain"]
runpy.run_module("bertology.cli", run_name="__main__")
