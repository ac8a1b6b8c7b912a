"""``bertology probe``: edge probing of every layer (per layer, scalar mix, cumulative), controls, MDL."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def _seeds(text: str) -> list[int]:
    from bertology.probes.probing.tasks import TaskError

    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise TaskError(f"--seeds must be comma-separated integers, got {text!r}") from None


def corpus_for_task_file(task) -> object:
    """A word-only ``Corpus`` holding a JSONL task's own sentences (so the store can embed them)."""
    from bertology.corpus import Corpus, Sentence

    sentences = [Sentence(sent_id=f"{task.name}-{i}", words=list(w)) for i, w in enumerate(task.words)]
    return Corpus(task.name, sentences, {"words": task.source})


def register(app: typer.Typer) -> None:
    @app.command("probe")
    def probe_cmd(
        task: str = typer.Option("pos", help="pos, xpos, deps, entities or a jiant-style FILE.jsonl"),
        model: str = typer.Option("minilm-l6", help="registry name or model directory"),
        corpus: str = typer.Option("brown-sample", help="bundled name or .conllu/.bio/.txt (ignored for .jsonl tasks)"),
        limit: Optional[int] = typer.Option(500, help="first N sentences of the corpus (0 = all)"),
        mode: str = typer.Option("per_layer", help="per_layer, mix, cumulative or all"),
        probe: str = typer.Option("mlp", help="mlp or linear"),
        pooling: str = typer.Option("attention", help="span pooling: attention or mean"),
        control: bool = typer.Option(False, help="also train on the Hewitt & Liang control task (selectivity)"),
        mdl: bool = typer.Option(False, help="also measure the online (MDL) codelength per layer"),
        seeds: str = typer.Option("0,1,2", help="probe seeds, comma-separated"),
        max_epochs: int = typer.Option(40, help="most training epochs per probe (early stopping on dev)"),
        device: str = typer.Option("cpu", help="where probes train: cpu or cuda"),
        out: Optional[Path] = typer.Option(None, help="result folder (default results/probe/<model>-<task>)"),
    ) -> None:
        """Probe every layer of a model for a span-labelling task; writes scores.parquet, summary.parquet."""
        import pandas as pd

        from bertology.probes.probing.edge import probe_layers, summarise, write_probe_results
        from bertology.probes.probing.mdl import online_codelength
        from bertology.probes.probing.tasks import TaskError, build_task
        from bertology import paths
        from bertology.corpus import load_corpus
        from bertology.models import load_model
        from bertology.store import extract

        modes = ["per_layer", "mix", "cumulative"] if mode == "all" else [mode]
        seed_list = _seeds(seeds)
        if not seed_list:
            raise TaskError("--seeds: give at least one seed")
        if task.endswith(".jsonl"):
            edge_task = build_task(None, task)
            c = corpus_for_task_file(edge_task)
        else:
            c = load_corpus(corpus, limit=limit or None)
            edge_task = build_task(c, task)
        lm = load_model(model, attentions=False)
        store = extract(lm, c, attentions=False)
        frames = [probe_layers(store, c, edge_task, mode=m, seeds=seed_list, probe=probe,
                               pooling=pooling, control=control and m == "per_layer", device=device,
                               max_epochs=max_epochs)
                  for m in modes]
        df = pd.concat(frames, ignore_index=True)
        table = summarise(df)
        typer.echo(f"{edge_task.name}: {len(edge_task)} examples, {len(edge_task.labels)} labels "
                   f"({edge_task.source})")
        acc = df[(df.metric == "accuracy") & (df.split == "test") & (~df.control)]
        typer.echo(acc.groupby(["mode", "layer"])["value"].agg(["mean", "std"]).round(4).to_string())
        typer.echo(table.round(3).to_string(index=False))
        tables = {}
        if control:
            sel = df[(df.metric == "selectivity") & (df.split == "test")]
            typer.echo("selectivity (test):\n" + sel.groupby("layer")["value"].mean().round(4).to_string())
        if mdl:
            from bertology.probes.probing.edge import ProbeConfig

            mdl_df = online_codelength(store.layers(), store.sentence_offsets, edge_task,
                                       seeds=seed_list[:1],
                                       config=ProbeConfig(probe=probe, pooling=pooling, device=device,
                                                          max_epochs=max_epochs))
            tables["mdl"] = mdl_df
            comp = mdl_df[mdl_df.metric.isin(["online_bits", "compression"])]
            typer.echo("MDL online code:\n" + comp.pivot_table(index="layer", columns="metric",
                                                               values="value").round(2).to_string())
        run = out or paths.results_dir() / "probe" / f"{Path(model).name}-{edge_task.name}"
        manifest = {"kind": "probe", "task": edge_task.name, "task_source": edge_task.source,
                    "model": {"name": lm.name, "fingerprint": lm.fingerprint},
                    "corpus": {"name": c.name, "fingerprint": c.fingerprint},
                    "modes": modes, "seeds": seed_list, "probe": probe, "pooling": pooling,
                    "control": control, "mdl": mdl}
        write_probe_results(df, run, manifest, extra_tables=tables)
        typer.echo(f"wrote {run}")
