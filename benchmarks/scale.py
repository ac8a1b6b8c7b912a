"""How time and memory grow with the corpus: wall time, CPU time and peak RSS of each analysis at 1x,
2x and 4x the corpus, for MiniLM-L6 and BERT-base / BERT-large shapes (random weights).

Every command runs as its own process (``bertology ...``, the way a researcher runs it) and is
measured by ``os.wait4``: wall seconds, user + system CPU seconds and the child's own peak resident
set size (``ru_maxrss``). The corpus at scale ``k`` is the bundled Brown sample (3,000 sentences,
gold POS) written ``k`` times with fresh sentence ids; the feature stores are extracted first (their
own rows: ``extract`` without attention maps, as probing and contextuality read it, and
``extract+attn`` with them, as head statistics read it -- two store keys), so each analysis row
measures the analysis reading its store. The baseline of each ratio is
the same command at 1x, run in this same invocation.

    .venv/bin/python benchmarks/scale.py                       # MiniLM, 1x 2x 4x: extract, probe pos
    .venv/bin/python benchmarks/scale.py --shapes minilm,base --scales 1,4 --analyses probe,heads,contextuality
    .venv/bin/python benchmarks/scale.py --base-sentences 750  # a quick look (750, 1,500, 3,000 sentences)
    .venv/bin/python benchmarks/scale.py --analyses contextuality,alignment  # the embedding analyses

Targets (issue 53): ``probe --task pos`` at 4x (12,000 sentences) peaks at <= 2 GB with MiniLM and
<= 4 GB with the BERT-base shape; every analysis at 4x takes <= 4.4x its 1x time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import machine_line

SHAPES = {  # name: (layers, hidden, heads, intermediate); None = the real MiniLM-L6
    "minilm": None,
    "base": (12, 768, 12, 3072),
    "large": (24, 1024, 16, 4096),
}
ANALYSES = {  # the analysis commands (each after the store is extracted)
    "probe": ["probe", "--task", "pos"],
    "probe-linear": ["probe", "--task", "pos", "--probe", "linear"],  # full-batch L-BFGS on the pooled inputs
    "heads": ["heads"],
    "contextuality": ["embeddings"],
    "structural": ["structural", "--no-random-baseline"],  # Hewitt & Manning's distance and depth probes
    # contextual alignment: layer 1 and the last layer of the store distilled to static vectors and
    # aligned by a rotation over their shared vocabulary (`bertology align`, the store named by folder)
    "alignment": ["align", "--dictionary", "identical"],
}
STORE_ANALYSES = (
    "probe",
    "probe-linear",
    "contextuality",
    "structural",
    "alignment",
)  # read the store without attention maps
EPOCH_OPTION = ("probe", "probe-linear", "structural")  # the analyses --probe-epochs fixes the epochs of


def build_corpus(out: Path, scale: int, base_sentences: int) -> Path:
    """The bundled sample's first ``base_sentences`` sentences written ``scale`` times (fresh ids)."""
    from bertology.corpus import load_corpus
    from bertology.corpus.conllu import write_conllu

    base = load_corpus("brown-sample", limit=base_sentences)
    copies = []
    for r in range(scale):
        for s in base.sentences:
            c = s.copy()
            c.sent_id = f"{s.sent_id}-r{r}"
            copies.append(c)
    path = out / f"brown-x{scale}.conllu"
    write_conllu(type(base)(name=f"brown-x{scale}", sentences=copies, sources=dict(base.sources)), path)
    return path


def build_model(out: Path, shape: str) -> str:
    """The model to name on the command line: ``minilm-l6``, or a random-weight BERT of the shape
    (MiniLM's tokenizer) saved as safetensors under ``out``."""
    if SHAPES[shape] is None:
        return "minilm-l6"
    import torch
    from transformers import BertConfig, BertModel

    from bertology.models import load_model

    layers, hidden, heads, inter = SHAPES[shape]  # type: ignore[misc]
    folder = out / f"bert-{shape}-random"
    if not (folder / "model.safetensors").is_file():
        tokenizer = load_model("minilm-l6").tokenizer
        torch.manual_seed(0)
        config = BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=inter,
        )
        BertModel(config).save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)
    return str(folder)


def probe_epochs(results: Path) -> tuple[float, float]:
    """(epochs, training seconds) of the newest ``edge_probing`` run under ``results``: early stopping
    ends after more epochs on more data (on a repeated corpus dev sentences have twins in training),
    so time per epoch is what must grow linearly with the words."""
    import pandas as pd

    runs = sorted((results / "edge_probing").glob("*/layer_scores.parquet"), key=lambda p: p.stat().st_mtime)
    df = pd.read_parquet(runs[-1])
    param = df[(df["split"] == "param") & ~df["control"].astype(bool)]
    return float(param.loc[param["metric"] == "epochs", "value"].sum()), float(
        param.loc[param["metric"] == "seconds", "value"].sum()
    )


def store_folder(work: Path, model: str, corpus: Path) -> Path:
    """The folder of the store (without attention maps) of ``model`` over ``corpus`` under ``work``'s home."""
    import json

    for manifest in sorted((work / "home" / "stores").glob("*/manifest.json")):
        info = json.loads(manifest.read_text())
        names = {info["model"].get("name"), info["model"].get("path")}
        if info["corpus"].get("path") == str(corpus) and model in names and not info["settings"]["attentions"]:
            return manifest.parent
    sys.exit(f"no store of {model} over {corpus} under {work / 'home' / 'stores'}")


def analysis_command(bertology: str, name: str, common: list[str], work: Path, model: str, corpus: Path) -> list[str]:
    """The command line of analysis ``name``: its options and the model and corpus (``alignment``:
    the store's folder, as ``bertology align`` names spaces)."""
    if name == "alignment":
        folder = store_folder(work, model, corpus)
        return [bertology, *ANALYSES[name], "--source", f"store:{folder}:1", "--target", f"store:{folder}:-1"]
    return [bertology, *ANALYSES[name], *common]


def measure(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    """Run ``cmd``; wall and CPU seconds and peak RSS (GB) of that process alone (``os.wait4``)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{output.decode(errors='replace')[-3000:]}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_gb": usage.ru_maxrss / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="minilm", help="comma-separated: minilm, base, large")
    parser.add_argument("--scales", default="1,2,4", help="comma-separated corpus multiples")
    parser.add_argument("--analyses", default="probe", help=f"comma-separated: {', '.join(ANALYSES)}")
    parser.add_argument("--base-sentences", type=int, default=3000, help="sentences of the 1x corpus")
    parser.add_argument("--work", type=Path, default=None, help="working folder (default: a temporary one)")
    parser.add_argument(
        "--probe-epochs",
        type=int,
        default=0,
        help="probe (and structural) for exactly this many epochs (--max-epochs; patience 3 keeps every layer's "
        "probe training through the first 3), so that time compares across sizes; 0: early stopping as configured",
    )
    args = parser.parse_args()
    shapes, analyses = args.shapes.split(","), args.analyses.split(",")
    scales = [int(s) for s in args.scales.split(",")]
    for name in shapes:
        if name not in SHAPES:
            sys.exit(f"unknown shape {name!r}: {', '.join(SHAPES)}")
    for name in analyses:
        if name not in ANALYSES:
            sys.exit(f"unknown analysis {name!r}: {', '.join(ANALYSES)}")
    work = args.work or Path(tempfile.mkdtemp(prefix="bertology-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    bertology = str(Path(sys.executable).with_name("bertology"))
    # stores are reused between invocations (the extract rows then measure a reopening); results are
    # fresh each time, so every analysis really runs
    results = work / f"results-{time.strftime('%Y%m%d-%H%M%S')}"
    env = dict(os.environ, BERTOLOGY_HOME=str(work / "home"), BERTOLOGY_RESULTS=str(results))
    env["BERTOLOGY_PROGRESS"] = "0"
    print(machine_line())
    print(f"1x = {args.base_sentences} Brown sentences; float32; every row its own process; work folder {work}")
    print("| model | analysis | scale | sentences | wall s | CPU s | peak RSS GB | wall / 1x | probe epochs, s/epoch |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape in shapes:
        model = build_model(work, shape)
        first: dict[str, float] = {}
        for scale in scales:
            corpus = build_corpus(work, scale, args.base_sentences)
            common = ["--model", model, "--corpus", str(corpus), "--limit", "0"]
            # the store each analysis reads: probing and contextuality keep no attention maps (a store
            # of its own key), head statistics do; each is extracted first, so analyses reopen it
            rows = []
            if any(a in analyses for a in STORE_ANALYSES):
                rows.append(("extract", [bertology, "extract", "--no-attentions", *common]))
            if "heads" in analyses:
                rows.append(("extract+attn", [bertology, "extract", *common]))
            epochs = ["--max-epochs", str(args.probe_epochs)] if args.probe_epochs else []
            rows += [(a, [*common, *(epochs if a in EPOCH_OPTION else [])]) for a in analyses]
            for name, cmd in rows:
                if name in ANALYSES:  # after the extract rows, so that alignment finds its store
                    cmd = analysis_command(bertology, name, cmd, work, model, corpus)
                m = measure(cmd, env)
                first.setdefault(name, m["wall"])
                epochs = ""
                if name.startswith("probe"):
                    n, seconds = probe_epochs(results)
                    epochs = f"{n:.0f}, {seconds / max(n, 1):.2f}"
                print(
                    f"| {shape} | {name} | {scale}x | {scale * args.base_sentences} | {m['wall']:.1f} | "
                    f"{m['cpu']:.1f} | {m['rss_gb']:.2f} | {m['wall'] / first[name]:.2f} | {epochs} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
