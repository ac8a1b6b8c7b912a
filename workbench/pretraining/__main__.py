"""``python -m bertology.pretraining --config FILE`` (and ``torchrun --nproc_per_node N -m bertology.pretraining``)."""

from bertology.pretraining.trainer import main

main()
