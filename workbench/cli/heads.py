"""``bertology heads`` (statistics, types, attention probe) and ``bertology prune`` (pruning curves)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from bertology.errors import WorkbenchError


def _run_dir(out: Optional[Path], kind: str, model: str) -> Path:
    from bertology import paths

    return out if out is not None else paths.results_dir() / f"{kind}-{model.replace('/', '_').replace('@', '_')}"


def run_heads(model: str, corpus: str, limit: Optional[int] = 200, seed: int = 0,
              word_vectors: str = "none") -> tuple[dict, dict]:
    """Head statistics, types, dependency scores and the attention probe: ``(tables, manifest)``.

    ``word_vectors``: spaCy vectors (``"en"``, a language, or a pipeline folder) for the
    attention-and-words probe; ``"none"`` skips it."""
    from bertology.probes.heads.attention_probe import attention_probe, best_heads
    from bertology.probes.heads.head_types import analyse_store
    from bertology.corpus import load_corpus
    from bertology.models import load_model
    from bertology.store import extract

    lm = load_model(model, attentions=True)
    data = load_corpus(corpus, limit=limit)
    store = extract(lm, data, attentions=True)
    tables = analyse_store(store, data)
    if not tables["head_dependency"].empty:
        atts = [store.attention(i) for i in range(len(data))]
        tables["head_best"] = best_heads(tables["head_dependency"], min_count=20)
        vectors = None
        if word_vectors != "none":
            from bertology.probes.embeddings.static_vectors import load_spacy_vectors

            vectors = load_spacy_vectors(word_vectors)
        tables["attention_probe"] = attention_probe(atts, list(data), seed=seed, word_vectors=vectors)
    manifest = {"analysis": "heads", "model": lm.name, "model_fingerprint": lm.fingerprint,
                "corpus": data.name, "corpus_fingerprint": data.fingerprint, "sources": data.sources,
                "n_sentences": len(data), "seed": seed, "word_vectors": word_vectors}
    return tables, manifest


def run_prune(model: str, corpus: str, method: str = "importance", limit: Optional[int] = 200, seed: int = 0,
              step: float = 0.1, lam: float = 0.01, steps: int = 200) -> tuple[dict, dict]:
    """Pruning curve (importance / random / type) or L0 gates, plus real-removal measurement."""
    from bertology.probes.heads.head_types import analyse_store
    from bertology.probes.heads.importance import importance_scores
    from bertology.probes.heads.pruning import (heads_dict, heads_pruned_at, measure_pruning, pos_task, pruning_curve,
                                train_l0_gates)
    from bertology.corpus import load_corpus
    from bertology.models import load_model
    from bertology.store import extract

    lm = load_model(model, attentions=True)
    data = load_corpus(corpus, limit=limit)
    train, evals, loss_fn, metric, task = pos_task(lm, data, seed=seed)
    tables = {"head_importance": importance_scores(lm.model, train, loss_fn)}
    if method == "l0":
        gates = train_l0_gates(lm.model, train, loss_fn, lam, steps=steps, seed=seed)
        tables["l0_gates"] = gates
        removed = [(int(r.layer), int(r.head)) for r in gates.itertuples() if not r.kept]
    else:
        head_types = None
        if method == "type":
            head_types = analyse_store(extract(lm, data, attentions=True), data)["head_types"]
        curve = pruning_curve(lm.model, metric, method=method, batches=train, loss_fn=loss_fn, step=step,
                              seeds=[seed, seed + 1, seed + 2] if method == "random" else [seed],
                              head_types=head_types, max_share=0.9)
        tables["pruning_curve"] = curve
        _, removed = heads_pruned_at(curve, 0.5)
    if removed:
        import pandas as pd

        report = measure_pruning(lm.model, heads_dict(removed), evals)
        tables["pruning_real"] = pd.DataFrame([report])
    manifest = {"analysis": "prune", "method": method, "task": task, "model": lm.name,
                "model_fingerprint": lm.fingerprint, "corpus": data.name, "corpus_fingerprint": data.fingerprint,
                "sources": data.sources, "n_sentences": len(data), "seed": seed, "step": step, "lam": lam}
    return tables, manifest


def register(app: typer.Typer) -> None:
    @app.command("heads")
    def heads_cmd(
        model: str = typer.Option("minilm-l6", "--model", help="registry name or model directory"),
        corpus: str = typer.Option("brown-sample", "--corpus", help="bundled name or corpus file"),
        out: Optional[Path] = typer.Option(None, "--out", help="results folder (default results/heads-<model>)"),
        limit: Optional[int] = typer.Option(200, "--limit", help="first N sentences"),
        seed: int = typer.Option(0, "--seed"),
        word_vectors: str = typer.Option("en", "--word-vectors",
                                         help="spaCy vectors for the attention-and-words probe (Clark's GloVe "
                                              "probe): en, a pipeline folder, or none"),
    ) -> None:
        """Attention-head statistics, head types and the attention-based dependency probe."""
        from bertology.results import write_results

        tables, manifest = run_heads(model, corpus, limit, seed, word_vectors)
        run_dir = write_results(_run_dir(out, "heads", model), tables, manifest)
        types = tables["head_types"]
        typer.echo(types["type"].value_counts().to_string())
        if "attention_probe" in tables:
            typer.echo(tables["attention_probe"][["method", "layer", "head", "uas"]].to_string(index=False))
        typer.echo(f"wrote {run_dir}")

    @app.command("prune")
    def prune_cmd(
        model: str = typer.Option("minilm-l6", "--model"),
        corpus: str = typer.Option("brown-sample", "--corpus"),
        method: str = typer.Option("importance", "--method", help="importance | random | type | l0"),
        out: Optional[Path] = typer.Option(None, "--out"),
        limit: Optional[int] = typer.Option(200, "--limit"),
        seed: int = typer.Option(0, "--seed"),
        step: float = typer.Option(0.1, "--step", help="share of all heads removed per step"),
        lam: float = typer.Option(0.01, "--lam", help="L0 penalty λ (method l0)"),
    ) -> None:
        """Head pruning curve (or L0 gates) on MLM loss or a POS tagging head; real removal timing."""
        from bertology.results import write_results

        if method not in ("importance", "random", "type", "l0"):
            raise WorkbenchError(f"--method {method!r}: choose importance, random, type or l0")
        tables, manifest = run_prune(model, corpus, method, limit, seed, step, lam)
        run_dir = write_results(_run_dir(out, f"prune-{method}", model), tables, manifest)
        if "pruning_curve" in tables:
            typer.echo(tables["pruning_curve"][["seed", "share_pruned", "metric"]].to_string(index=False))
        if "l0_gates" in tables:
            typer.echo(f"kept {int(tables['l0_gates']['kept'].sum())} of {len(tables['l0_gates'])} heads")
        if "pruning_real" in tables:
            typer.echo(tables["pruning_real"].T.to_string(header=False))
        typer.echo(f"wrote {run_dir}")
