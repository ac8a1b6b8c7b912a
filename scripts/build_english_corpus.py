#!/usr/bin/env python3
"""Build the offline English pretraining corpus from a checkout: the same as ``bertology
build-corpus`` (library: ``bertology.pretraining.english_corpus.build_english_corpus``; its
docstring lists the sources, licences and output format).

    python scripts/build_english_corpus.py --out DIR [--sources a,b,c] [--heldout-fraction 0.01]
                                           [--seed 0] [--cache DIR] [--brown PATH] [--strict]
"""

from __future__ import annotations

import sys

from bertology.pretraining.english_corpus import main

if __name__ == "__main__":
    sys.exit(main())
