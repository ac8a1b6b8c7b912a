# %% [markdown]
# # Attention heads walkthrough: types, the best head per relation, one head's map
#
# A percent-format script (open it as a notebook with jupytext, or run it with
# `python examples/heads_walkthrough.py`). It reads the attention of the real MiniLM-L6 over the
# bundled Brown sample (silver spaCy dependencies) and asks what Voita et al. (2019) and Clark et
# al. (2019) asked of BERT's heads. `WALKTHROUGH_SENTENCES` sets the corpus size (default 300).

# %%
import os

import numpy as np

from bertology.corpus import load_corpus
from bertology.models import load_model
from bertology.numbering import to_index
from bertology.probes.heads import best_head_per_relation, head_types, type_matrix
from bertology.store import extract

N = int(os.environ.get("WALKTHROUGH_SENTENCES", 300))

# %% [markdown]
# ## 1. A store with attention maps
# `attentions=True` keeps every head's word-level attention map of every sentence (and the
# token-level argmax offsets Voita et al. count) on disk; a second run reopens the store.

# %%
corpus = load_corpus("brown-sample", limit=N)
lm = load_model("minilm-l6")
store = extract(lm, corpus, attentions=True)
print(store)
print("sentence 0:", store.attention(0).shape, "# [layers, heads, words, words], indexed from 0")

# %% [markdown]
# ## 2. Head types
# One row per head: positional (its argmax at a fixed offset in most rows), syntactic (beats the
# best offset for a relation), rare-token, special ([CLS]/[SEP]) or broad; the definitions are the
# papers' (docs/METHODS.md) and each is a keyword option.

# %%
types = head_types(store, corpus)
print(types["type"].value_counts().to_string())
print(type_matrix(types).to_string())

# %% [markdown]
# ## 3. The best head per relation, chosen on half the sentences, read on the other half
# Clark et al. report the best head per relation; choosing it on the sentences it is scored on
# overstates it. Here it is chosen on a dev half and reported on the test half with a 95% interval
# and a paired test of its gain over the best fixed offset.

# %%
best = best_head_per_relation(store, corpus, min_count=10)
columns = [
    "relation",
    "direction",
    "layer",
    "head",
    "accuracy",
    "accuracy_low",
    "accuracy_high",
    "baseline_offset",
    "gain",
    "gain_p_value",
    "small_sample",
]
print(best[columns].head(8).round(3).to_string(index=False))

# %% [markdown]
# ## 4. One head's attention over one sentence
# Rows are the words attending, columns the words attended to; each row sums to 1 over the words
# and the special tokens (`store.special_attention(i)`). Tables number layers and heads from 1
# (`bertology.numbering`); the store's arrays are indexed from 0: head h of layer l is `[l - 1, h - 1]`.

# %%
layer, head = int(best.iloc[0]["layer"]), int(best.iloc[0]["head"])
sentence = corpus[0]
print(f"layer {layer}, head {head}:")
attention = store.attention(0)[to_index(layer), to_index(head)]  # numbers from 1 -> array indices from 0
for word, row in zip(sentence.words, attention):
    print(f"{word:>15} -> {sentence.words[int(np.argmax(row))]}")
