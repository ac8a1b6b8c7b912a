# %% [markdown]
# # Alignment walkthrough: rotate one embedding space onto another
#
# A percent-format script (open it as a notebook with jupytext, or run it with
# `python examples/alignment_walkthrough.py`). Two spaces that share a vocabulary -- here the
# static vectors distilled from layer 1 and layer 5 of MiniLM-L6 over the bundled Brown sample --
# are aligned by an orthogonal map found by SVD (Procrustes), checked on held-out words, and the
# words whose vectors move most between them are listed. The same calls align two languages, two
# models or two eras. `WALKTHROUGH_SENTENCES` sets the corpus size (default 600).

# %%
import os

import numpy as np

from bertology.corpus import load_corpus
from bertology.models import load_model
from bertology.probes.embeddings import align, distill_static, evaluate_alignment, most_moved_words
from bertology.store import extract

N = int(os.environ.get("WALKTHROUGH_SENTENCES", 600))

# %% [markdown]
# ## 1. Two static spaces from one store
# A word's static vector is the mean of its contextual vectors over its occurrences (Ethayarajh
# 2019; Bommasani et al. 2020 call it the aggregated embedding). Only words seen twice or more.

# %%
corpus = load_corpus("brown-sample", limit=N)
store = extract(load_model("minilm-l6"), corpus, attentions=False)
words = corpus.flat_words()
low = distill_static(store.layer(1), words, min_count=2, name="layer 1")
high = distill_static(store.layer(5), words, min_count=2, name="layer 5")
print(low, high, sep="\n")

# %% [markdown]
# ## 2. Procrustes on most words, precision@k on held-out ones
# The map is fitted on 80% of the shared words and scored on the rest, retrieving over the whole
# target vocabulary by nearest neighbour and by CSLS (Conneau et al. 2018).

# %%
shared = [w for w in low.words if w in set(high.words)]
rng = np.random.default_rng(0)
held_out = set(rng.choice(shared, size=len(shared) // 5, replace=False).tolist())
train = [(w, w) for w in shared if w not in held_out]
test = [(w, w) for w in shared if w in held_out]
result = align(low, high, train_pairs=train, method="procrustes")
print(result)
print(evaluate_alignment(result, low, high, test).round(3).to_string(index=False))

# %% [markdown]
# ## 3. The words that moved most
# After the rotation, the words whose layer-1 and layer-5 vectors still disagree most: where
# context changes a word's representation most between the two layers.

# %%
moved = most_moved_words(low, high, result, k=10)
print(moved.to_string(index=False))
