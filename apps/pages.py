"""The dashboard's pages: names, titles and the "what am I looking at" line of each (shared by the
dashboard, the screenshot script and the browser tests)."""

from __future__ import annotations

PAGES = ["Runs", "Probing", "Feature combinations", "Heads", "Pruning", "Embeddings", "Alignment",
         "Pretraining", "Compare runs"]
PAGE_STUDY = {"Probing": "edge_probing", "Feature combinations": "feature_combinations", "Heads": "head_types",
              "Pruning": "pruning", "Embeddings": "contextuality", "Alignment": "alignment",
              "Pretraining": "emergence"}
TITLES = {"Runs": "Runs", "Probing": "Edge probing (Tenney et al. 2019)",
          "Feature combinations": "Feature-based combinations (Devlin et al. 2019, Table 7)",
          "Heads": "Attention heads (Voita et al. 2019, Clark et al. 2019)",
          "Pruning": "Head importance and pruning (Michel et al. 2019, Voita et al. 2019)",
          "Embeddings": "Static vs contextual embeddings (Ethayarajh 2019)",
          "Alignment": "Rotation alignment (Procrustes, self-learning, CSLS)",
          "Pretraining": "Pretraining and emergence", "Compare runs": "Compare two runs"}
# The "what am I looking at" line of each page.
INTROS = {
    "Runs": "Every study run under the results folder, newest first: its seed, model and tables. "
            "A run whose manifest cannot be read says why; the other runs still show.",
    "Probing": "A small classifier per layer predicts each word's label (part of speech, entity...) from that "
               "layer's frozen vectors: where the curve rises is where the information becomes linearly readable. "
               "Tenney et al. 2019, *BERT Rediscovers the Classical NLP Pipeline*; controls: Hewitt & Liang 2019.",
    "Feature combinations": "Which layers to feed a task model when BERT stays frozen: last layer, sums and "
                            "concatenations of the last four... Devlin et al. 2019, *BERT*, Table 7.",
    "Heads": "Each square is one attention head, coloured by what it does: attends to a fixed relative position "
             "(positional), to a word's syntactic head or dependent (syntactic), to rare words, to [CLS]/[SEP] "
             "(special), or broadly. Click a head (or pick it below) for its attention on example sentences, where "
             "its attention peaks, and the relations it tracks. Voita et al. 2019, *Analyzing Multi-Head "
             "Self-Attention*; Clark et al. 2019, *What Does BERT Look At?*.",
    "Pruning": "How much the metric worsens as heads are removed, most or least important first; importance is the "
               "gradient of the loss with respect to a gate on each head. Michel et al. 2019, *Are Sixteen Heads "
               "Really Better than One?*; L0 gates: Voita et al. 2019.",
    "Embeddings": "How contextual is each layer: self-similarity of a word across its contexts, similarity of words "
                  "within a sentence, and the variance one static vector can explain (MEV), each beside the "
                  "anisotropy baseline of random words. Ethayarajh 2019, *How Contextual are Contextualized Word "
                  "Representations?*.",
    "Alignment": "Two embedding spaces mapped onto each other by a rotation learnt from a seed dictionary, "
                 "scored by translation retrieval (P@k, CSLS). Mikolov et al. 2013; Conneau et al. 2018; "
                 "Artetxe et al. 2017.",
    "Pretraining": "The project's own BERT during masked-language-model pretraining (Devlin et al. 2019): loss, and at "
                   "each saved checkpoint its head types, probe accuracy and masked-word guesses; Voita et al. 2019 "
                   "see positional heads appear early.",
    "Compare runs": "The main table of two runs of one study side by side (another model, seed or config).",
}
