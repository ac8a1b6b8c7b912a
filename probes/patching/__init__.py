"""Causal (activation) patching for encoders: clean -> corrupted, per layer x position and per head.

What TransformerLens does for decoders, for BERT-family masked-language models: run a clean and a
corrupted sentence of the same token length, copy one activation of the clean run into the
corrupted run, and measure how much of the difference in the masked word's score
``log P(target) - log P(foil)`` it restores.

For notebooks (``lm = load_model(name, mlm_head=True)``)::

    states = patch_hidden_states(lm, "The key to the cabinets [MASK] here .",
                                 "The keys to the cabinets [MASK] here .", "is", "are")
    # (L + 1) x T rows: layer (0 = embeddings), position, token, score, restored
    heads = patch_heads(lm, clean, corrupted, "is", "are")           # L x H rows: layer, head, restored
    heads = patch_heads(lm, clean, corrupted, "is", "are", position=6)  # one token only

- :mod:`~bertology.probes.patching.activations`: the hook sites (hidden states, head contexts) for
  every architecture of :mod:`bertology.architectures`;
- :mod:`~bertology.probes.patching.patch`: pairs, scores, batched patched runs, the metric;
- :mod:`~bertology.probes.patching.minimal_pairs`: subject-verb agreement pairs through attractors;
- :mod:`~bertology.probes.patching.analysis`: :func:`patching_analysis`, the ``patching`` study.
"""

from bertology.probes.patching.analysis import PATCHING_DEFAULTS, pair_accuracy, patching_analysis, summarise_sites
from bertology.probes.patching.minimal_pairs import AgreementPair, agreement_pairs
from bertology.probes.patching.patch import (
    EncodedPair,
    PairRun,
    PatchingError,
    encode_pair,
    head_scores,
    hidden_state_scores,
    pair_scores,
    patch_heads,
    patch_hidden_states,
    restored_fraction,
)

__all__ = [
    "AgreementPair",
    "EncodedPair",
    "PATCHING_DEFAULTS",
    "PairRun",
    "PatchingError",
    "agreement_pairs",
    "encode_pair",
    "head_scores",
    "hidden_state_scores",
    "pair_accuracy",
    "pair_scores",
    "patch_heads",
    "patch_hidden_states",
    "patching_analysis",
    "restored_fraction",
    "summarise_sites",
]
