# %% [markdown]
# # Probing walkthrough: from a model to a Tenney-style table
#
# A percent-format script (open it as a notebook in VS Code / Jupyter with jupytext, or run it
# with `python examples/probing_walkthrough.py`). It walks the probing API end to end on the
# embedded default: the real MiniLM-L6 and the bundled Brown sample (gold UPOS, silver
# dependencies and entities). `WALKTHROUGH_SENTENCES` sets the corpus size (default 400).

# %%
import os

import numpy as np

from bertology.corpus import load_corpus
from bertology.models import load_model
from bertology.probes.probing.edge import EdgeProbe, pooled_features, probe_layers, summarise
from bertology.probes.probing.tasks import build_task
from bertology.store import extract

N = int(os.environ.get("WALKTHROUGH_SENTENCES", 400))
EPOCHS = int(os.environ.get("WALKTHROUGH_EPOCHS", 10))

# %% [markdown]
# ## 1. Model, corpus, feature store
# The store keeps every layer's word vectors (first subword) on disk; running this cell again
# reopens it instead of recomputing.

# %%
corpus = load_corpus("brown-sample", limit=N)
print(corpus.describe())
lm = load_model("minilm-l6")
store = extract(lm, corpus, attentions=False)
print(store)
X4 = store.layer(4)  # [n_words, 384]
print("layer 4 word vectors:", X4.shape)

# %% [markdown]
# ## 2. One layer with the scikit-learn estimator
# `EdgeProbe` is a scikit-learn classifier: `fit`, `predict`, `score`, `get_params`, so it works
# with pipelines and grid searches. Its input is span-pooled features.

# %%
task = build_task(corpus, "pos")
X = pooled_features(X4, store.sentence_offsets, task)
y = np.array([ex.labels[0] for ex in task.examples])
split = int(0.8 * len(y))
probe = EdgeProbe(probe="linear", max_epochs=EPOCHS).fit(X[:split], y[:split])
print("layer-4 POS accuracy (linear probe):", round(probe.score(X[split:], y[split:]), 3))

# %% [markdown]
# ## 3. Every layer at once, a scalar mix, cumulative scoring
# `probe_layers` trains one probe per layer jointly (one vectorised model over the layer axis)
# and returns a tidy DataFrame: one row per task, mode, layer, seed, split and metric.

# %%
frames = []
for task_name in ("pos", "deps", "entities"):
    for mode in ("per_layer", "mix", "cumulative"):
        frames.append(probe_layers(store, corpus, task_name, mode=mode, seeds=(0, 1), max_epochs=EPOCHS))
import pandas as pd  # noqa: E402

scores = pd.concat(frames, ignore_index=True)
test_acc = scores.query("split == 'test' and metric == 'accuracy' and mode == 'per_layer'")
print(test_acc.groupby(["task", "layer"])["value"].mean().unstack().round(3))

# %% [markdown]
# ## 4. The summary table (Tenney et al. 2019, Table 1 style)
# `expected_layer_mix` is the centre of gravity of the scalar-mix weights; `expected_layer_cumulative`
# the expected layer of the differential gains of cumulative probes.

# %%
table = summarise(scores)
print(table.round(3).to_string(index=False))

# %% [markdown]
# ## 5. Controls: is the probe reading the representation or memorising word types?
# Hewitt & Liang control task: each word type gets a random label; selectivity = task − control.

# %%
ctrl = probe_layers(store, corpus, "pos", seeds=(0,), control=True, probe="linear", max_epochs=EPOCHS)
print(ctrl.query("metric == 'selectivity' and split == 'test'")[["layer", "value"]].round(3).to_string(index=False))
