"""One-GPU throughput of the workbench at BERT-base size, each path against a bare baseline run in
the same process on the same batches (issue 40's table).

Run: ``python benchmarks/gpu.py PART [--tiny] [--out DIR] [--budget S]`` with PART one of

- ``setup``: versions, the GPU, a BERT-base folder with random weights (bert-mini-english's
  tokenizer, vocab 8,192), and a bf16 8192³ matmul measured now (the MFU reference besides the
  989 TFLOP/s dense bf16 peak of an H100 SXM);
- ``extract``: the feature store (hidden states + attention maps of every layer, 2,000 Brown
  sentences) against the bare HF forward over the store's own batches, and the disk's write rate
  measured in the same run (the same bytes written and fsynced in 64 MiB chunks): the target is
  ≥ 0.5× the bare forward, or ≥ 0.8× the disk's bytes/s, whichever binds;
- ``pretrain``: ``run_pretraining`` (recipe ``bert_base_gpu``, one optimizer step per batch)
  against a minimal loop (``model(**batch).loss.backward(); AdamW.step()`` over pre-built masked
  batches already on the GPU), then both with ``torch.compile``;
- ``report``: the parts' figures as one markdown table.

Each part appends its figures to ``OUT/gpu-<part>.json`` as they come (a part stopped by its
timeout keeps what it measured). FLOPs: forward ``Σ 2·N_nonemb·n + 4·L·n²·d`` over sequences
(``n`` real tokens); training ``6·N·tokens`` (non-padding tokens, every parameter).
``--tiny`` runs every part on the CPU at toy sizes (the smoke test of the script itself).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

H100_PEAK = 989e12
ARGS: argparse.Namespace
T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f}s] {msg}", flush=True)


def left() -> float:
    return ARGS.budget - (time.perf_counter() - T0)


def device() -> torch.device:
    return torch.device("cpu" if ARGS.tiny or not torch.cuda.is_available() else "cuda")


def sync() -> None:
    if device().type == "cuda":
        torch.cuda.synchronize()


class Figures:
    """One part's JSON, rewritten after every figure."""

    def __init__(self, part: str):
        self.path = Path(ARGS.out) / f"gpu-{part}.json"
        self.data: dict = {"part": part, "tiny": ARGS.tiny}
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def put(self, key: str, value) -> None:
        self.data[key] = value
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        tmp.replace(self.path)
        print(f"RESULT {key} = {json.dumps(value, default=str)}", flush=True)


def error_text(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}{where}"[:400]


def sizes() -> dict:
    if ARGS.tiny:
        return dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128)
    return dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072)


def work() -> Path:
    return Path(ARGS.work)


def model_dir() -> Path:
    return work() / "bert-base-random"


# --------------------------------------------------------------------------- setup


def part_setup() -> None:
    import platform

    import transformers
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from bertology import paths

    fig = Figures("setup")
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "device": str(device()),
    }
    if device().type == "cuda":
        p = torch.cuda.get_device_properties(0)
        info.update(
            gpu=torch.cuda.get_device_name(0),
            memory_gib=round(p.total_memory / 2**30, 1),
            capability=f"{p.major}.{p.minor}",
            sms=p.multi_processor_count,
        )
    fig.put("versions", info)
    src = paths.shipped_models_dir() / "bert-mini-english" / "checkpoint-3800"
    folder = model_dir()
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "tokenizer.json", folder / "tokenizer.json")
    tcfg = json.loads((src / "tokenizer_config.json").read_text())
    tcfg["model_max_length"] = 512
    (folder / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=1))
    tok = AutoTokenizer.from_pretrained(str(folder))
    config = BertConfig(vocab_size=len(tok), max_position_embeddings=512, pad_token_id=tok.pad_token_id, **sizes())
    torch.manual_seed(0)
    with torch.device(device()):
        model = BertForMaskedLM(config)
    model.to("cpu").save_pretrained(str(folder))
    fig.put("model", {"parameters": sum(p.numel() for p in model.parameters()), **sizes(), "vocab": len(tok)})
    n = 512 if ARGS.tiny else 8192
    a = torch.randn(n, n, device=device(), dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device(), dtype=torch.bfloat16)
    for _ in range(3 if ARGS.tiny else 30):
        a @ b
    best = math.inf
    for _ in range(5):
        sync()
        t = time.perf_counter()
        for _ in range(2 if ARGS.tiny else 20):
            a @ b
        sync()
        best = min(best, (time.perf_counter() - t) / (2 if ARGS.tiny else 20))
    fig.put("matmul_bf16_flop_per_s", 2 * n**3 / best)
    log(f"bf16 matmul {n}^3: {2 * n**3 / best / 1e12:.1f} TFLOP/s")


def matmul_rate() -> float:
    p = Path(ARGS.out) / "gpu-setup.json"
    return json.loads(p.read_text()).get("matmul_bf16_flop_per_s", H100_PEAK) if p.is_file() else H100_PEAK


# --------------------------------------------------------------------------- extraction


def disk_write_rate(root: Path, n_bytes: int) -> float:
    """Bytes/s of writing ``n_bytes`` (64 MiB chunks, one file per 256 MiB, each fsynced) into ``root``."""
    chunk = bytearray(os.urandom(1 << 20)) * 64
    per_file = 256 << 20
    written, t = 0, time.perf_counter()
    i = 0
    while written < n_bytes:
        with open(root / f"disk-probe-{i}", "wb") as f:
            in_file = 0
            while in_file < per_file and written < n_bytes:
                f.write(chunk)
                in_file += len(chunk)
                written += len(chunk)
            f.flush()
            os.fsync(f.fileno())
        i += 1
    seconds = time.perf_counter() - t
    for p in root.glob("disk-probe-*"):
        p.unlink()
    return written / seconds


def part_extract() -> None:
    from bertology.corpus import load_corpus
    from bertology.models import load_model
    from bertology.runtime import keep_freed_memory, resolve_precision

    fig = Figures("extract")
    dev = device()
    keep_freed_memory()
    lm = load_model(str(model_dir()), attentions=True, device=str(dev))
    fig.put("auto_precision", str(resolve_precision("auto", dev)))
    sample = load_corpus("brown-sample")
    n = 24 if ARGS.tiny else ARGS.sentences
    n_warm = 8 if ARGS.tiny else 200
    pool = len(sample) - n_warm
    corpus = sample.subset([i % pool for i in range(n)])
    n_large = 96 if ARGS.tiny else ARGS.large_sentences
    corpora = {"main": corpus, "large": sample.subset([i % pool for i in range(n_large)])}
    warm = sample.subset(range(pool, len(sample)))
    root = work() / "stores"
    root.mkdir(parents=True, exist_ok=True)
    big = 256 if ARGS.tiny else 8192
    fast = {"amp_dtype": "bfloat16", "storage": "float16", "batch_tokens": big}
    rows = _extract_rows(big, fast, f"{n_large:,} sentences")
    sets = {}
    for _, bt, _, which in rows.values():
        if (bt, which) not in sets:
            sets[bt, which] = (*_store_batches(lm, corpora[which], bt), _store_batches(lm, warm, bt)[0])

    def run(name: str, warmup: bool) -> tuple[float, int]:
        opt, bt, _, which = rows[name]
        return _time_path(lm, opt, sets[bt, which], warm if warmup else corpora[which], root, warmup)

    failed: dict[str, str] = {}
    for name in rows:
        try:
            run(name, warmup=True)
        except Exception as exc:
            failed[name] = error_text(exc)
            traceback.print_exc(limit=-4)
    fig.put("failed", failed)
    results, store_bytes = _extract_rounds(run, rows, sets, corpora, failed)
    # the disk, measured in the same run on the same folder, with the largest store's byte count
    rate = disk_write_rate(root, store_bytes or (64 << 20))
    fig.put("disk_write_bytes_per_s", rate)
    for name, row in results.items():
        if "bytes_per_s" in row:
            row["ratio_to_disk"] = row["bytes_per_s"] / rate
            base = rows[name][2]
            if base in results:
                forward_bound = results[base]["seconds"] / 0.5  # the store's time at 0.5x the bare forward
                disk_bound = row["bytes"] / (0.8 * rate)  # ... at 0.8x the disk's bytes/s
                row["binding"] = "disk" if disk_bound > forward_bound else "forward"
                row["target_met"] = bool(row["seconds"] <= max(forward_bound, disk_bound))
    fig.put("paths", results)
    # diagnostics of one more store run each, while the budget lasts; a failure is recorded, not fatal
    for key, diagnose in (
        ("stages", store_stages),
        ("profile", store_profile),
        ("writers_off", store_without_writes),
        ("trace", store_trace),
    ):
        if left() <= 15:
            break
        try:
            fig.put(key, diagnose(lm, corpus, root, dev, fast))
        except Exception as exc:
            fig.put(key, {"error": error_text(exc)})
            traceback.print_exc(limit=-4)
    if dev.type == "cuda":
        fig.put("peak_memory_gib", torch.cuda.max_memory_allocated() / 2**30)


def _extract_rows(big: int, fast: dict, large: str) -> dict[str, tuple]:
    """The timed paths: name -> (bare forward's amp dtype or the store's options, batch tokens,
    the bare baseline's name, the corpus: ``main`` or ``large``)."""
    return {
        "bare forward, float32, 1024-token batches": (None, 1024, None, "main"),
        "store, defaults (float32)": ({}, 1024, "bare forward, float32, 1024-token batches", "main"),
        f"bare forward, bf16, {big}-token batches": (torch.bfloat16, big, None, "main"),
        f"store, bf16, float16 storage, {big}-token batches": (
            fast,
            big,
            f"bare forward, bf16, {big}-token batches",
            "main",
        ),
        f"store, auto precision, float16 storage, {big}-token batches": (
            {"amp_dtype": "auto", "storage": "float16", "batch_tokens": big},
            big,
            f"bare forward, bf16, {big}-token batches",
            "main",
        ),
        # a larger corpus: the store's fixed costs (tokenising, planning, the first forward before
        # any write, the last write after every forward, the manifest) spread over more bytes
        f"bare forward, bf16, {big}-token batches, {large}": (torch.bfloat16, big, None, "large"),
        f"store, bf16, float16 storage, {big}-token batches, {large}": (
            fast,
            big,
            f"bare forward, bf16, {big}-token batches, {large}",
            "large",
        ),
    }


def _store_batches(lm, c, batch_tokens: int) -> tuple[list[dict], dict]:
    """The batches the store runs over corpus ``c`` (on the device), and their real tokens and
    forward FLOPs (``Σ 2·N_nonemb·n + 4·L·n²·d``)."""
    from bertology.features import model_max_tokens, padded_inputs, segment_sentence, tokenize_sentences
    from bertology.store.plan import plan_batches, plan_shards

    dev = device()
    L, d = lm.config.num_hidden_layers, lm.config.hidden_size
    n_nonemb = sum(p.numel() for name, p in lm.model.named_parameters() if not name.startswith("embeddings"))
    tokens = tokenize_sentences(lm.tokenizer, [s.words for s in c])
    limit = model_max_tokens(lm.model, lm.tokenizer)
    segs = [segment_sentence(lm.tokenizer, s.words, i, limit, "error", s.sent_id, tokens[i]) for i, s in enumerate(c)]
    pad = lm.tokenizer.pad_token_id or 0
    out, real, flops = [], 0, 0.0
    for shard in plan_shards(segs, 256):
        for batch in plan_batches([s for i in shard for s in segs[i]], batch_tokens):
            ids, mask = padded_inputs(batch, pad)
            out.append({"input_ids": ids.to(dev), "attention_mask": mask.to(dev)})
            lens = mask.sum(1).tolist()
            real += sum(lens)
            flops += sum(2 * n_nonemb * t + 4 * L * t * t * d for t in lens)
    return out, {"tokens": real, "forward_flops": flops}


def _bare(lm, batches: list[dict], amp) -> None:
    """The bare HF forward (every layer's states and attention maps returned) over ``batches``."""
    dev = device()
    with torch.inference_mode(), torch.autocast(dev.type, dtype=amp or torch.float32, enabled=amp is not None):
        for b in batches:
            lm.model(**b, output_hidden_states=True, output_attentions=True)
    sync()


def _time_path(lm, opt, batch_set: tuple, text, root: Path, warmup: bool) -> tuple[float, int]:
    """Seconds of one run of a path (the bare forward over the set's batches, its warm-up batches when
    ``warmup``; or a store of ``text`` with options ``opt``, written to a new folder under ``root`` and
    deleted), and the bytes the store wrote (0 for the bare forward)."""
    from bertology.store import extract

    dev = device()
    batches, _, warm_batches = batch_set
    if not isinstance(opt, dict):
        sync()
        t = time.perf_counter()
        _bare(lm, warm_batches if warmup else batches, opt)
        return time.perf_counter() - t, 0
    where = Path(tempfile.mkdtemp(dir=root))
    try:
        sync()
        t = time.perf_counter()
        store = extract(lm, text, root=where, device=str(dev), progress=False, **opt)
        sync()
        seconds = time.perf_counter() - t
        return seconds, sum(store.manifest["shard_bytes"].values())
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _extract_rounds(run, rows: dict[str, tuple], sets: dict, corpora: dict, failed: dict[str, str]) -> tuple[dict, int]:
    """The timed rounds (two, the second in reverse order; one with ``--tiny``) over the paths that
    warmed up, while the budget lasts: per path its runs, best seconds, words/s, bytes/s, MFU and
    ratio to its bare baseline; and the largest store's bytes."""
    results: dict[str, dict] = {}
    store_bytes = 0
    for r in range(1 if ARGS.tiny else 2):
        for name in list(rows) if r == 0 else list(rows)[::-1]:
            if name in failed or left() < 20:
                continue
            seconds, n_bytes = run(name, warmup=False)
            row = results.setdefault(name, {"runs": []})
            row["runs"].append(round(seconds, 4))
            best = min(row["runs"])
            _, bt, _, which = rows[name]
            flops = sets[bt, which][1]["forward_flops"]
            words = corpora[which].n_words
            row.update(
                seconds=best,
                words=words,
                words_per_s=words / best,
                mfu_peak=flops / best / H100_PEAK,
                mfu_matmul=flops / best / matmul_rate(),
            )
            if n_bytes:
                row.update(bytes=n_bytes, bytes_per_s=n_bytes / best)
                store_bytes = max(store_bytes, n_bytes)
            base = rows[name][2]
            if base in results:
                row["ratio_to_bare"] = results[base]["seconds"] / best
            log(f"round {r + 1} {name}: {seconds:.3f} s, {corpora[rows[name][3]].n_words / seconds:,.0f} words/s")
    return results, store_bytes


def store_profile(lm, corpus, root: Path, dev: torch.device, options: dict, top: int = 25) -> list[str]:
    """cProfile of one more store run (the main thread: issuing the forwards and pooling, and any
    wait for the device there shows as the time of the call that waited), the ``top`` lines by
    own time, printed and returned."""
    import cProfile
    import io
    import pstats

    from bertology.store import extract

    where = Path(tempfile.mkdtemp(dir=root))
    profile = cProfile.Profile()
    try:
        sync()
        profile.enable()
        extract(lm, corpus, root=where, device=str(dev), progress=False, **options)
        sync()
        profile.disable()
    finally:
        shutil.rmtree(where, ignore_errors=True)
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(top)
    lines = [line for line in text.getvalue().splitlines() if line.strip()]
    print("\n".join(lines), flush=True)
    return lines


def store_without_writes(lm, corpus, root: Path, dev: torch.device, options: dict) -> dict:
    """One store run with the writer threads doing nothing but wait for each shard's copy to the
    host (no hashing, no file written: the store is not kept): the main thread's pipeline alone --
    forwards, pooling, device-to-host copies. Its time against a normal run's says whether the
    writers or the main thread bind; ``bytes_per_s`` is what the disk would have to take."""
    import bertology.store.compute as compute
    from bertology.store import extract

    saved = compute.write_shard
    sizes_seen: list[int] = []

    def no_write(path, tensors, hash_beside=False):
        sizes_seen.append(sum(t.numel() * t.element_size() for t in tensors.values()))

    where = Path(tempfile.mkdtemp(dir=root))
    try:
        compute.write_shard = no_write
        sync()
        t = time.perf_counter()
        try:
            extract(lm, corpus, root=where, device=str(dev), progress=False, **options)
        except Exception as exc:  # the manifest step finds no shard files: the computing is done
            log(f"writers off: extract ended with {type(exc).__name__} after computing (expected: no shards written)")
        sync()
        seconds = time.perf_counter() - t
    finally:
        compute.write_shard = saved
        shutil.rmtree(where, ignore_errors=True)
    out = {"seconds": seconds, "shards": len(sizes_seen), "bytes": sum(sizes_seen)}
    out["bytes_per_s"] = out["bytes"] / seconds if seconds else None
    log(f"writers off: {seconds:.3f} s for {out['shards']} shards, {out['bytes'] / 1e9:.2f} GB computed and copied")
    return out


def store_trace(lm, corpus, root: Path, dev: torch.device, options: dict, top: int = 25) -> dict:
    """``torch.profiler`` over one more store run, CPU and CUDA activities: the ``top`` operators
    and runtime calls by their own CPU time (host syncs show here: ``cudaStreamSynchronize``,
    ``cudaEventSynchronize``, ``cudaMemcpyAsync`` from pageable memory, ``aten::item``,
    ``aten::nonzero``), the device's busy time (the sum of kernel and copy times) against the wall
    time, and the runtime calls that wait for the device, summed."""
    from torch.profiler import ProfilerActivity, profile

    from bertology.store import extract

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    where = Path(tempfile.mkdtemp(dir=root))
    try:
        sync()
        t = time.perf_counter()
        with profile(activities=activities) as prof:
            extract(lm, corpus, root=where, device=str(dev), progress=False, **options)
            sync()
        wall = time.perf_counter() - t
    finally:
        shutil.rmtree(where, ignore_errors=True)
    events = prof.key_averages()
    table = events.table(sort_by="self_cpu_time_total", row_limit=top, max_name_column_width=48)
    waits = ("Synchronize", "cudaMemcpy", "aten::item", "aten::nonzero", "aten::_local_scalar_dense", "HostAlloc")
    waiting = {
        e.key: {"calls": e.count, "self_cpu_s": e.self_cpu_time_total / 1e6}
        for e in events
        if any(w in e.key for w in waits)
    }
    device_s = sum(getattr(e, "self_device_time_total", 0.0) for e in events) / 1e6
    lines = [line for line in table.splitlines() if line.strip()]
    print("\n".join(lines), flush=True)
    log(f"trace: wall {wall:.3f} s (profiled), device busy {device_s:.3f} s")
    return {"wall_s": wall, "device_busy_s": device_s, "waiting_calls": waiting, "table": lines}


def store_stages(lm, corpus, root: Path, dev: torch.device, options: dict) -> dict:
    """Where one store run's time goes (one extra run, after the timed ones): wall time of the
    whole ``extract``; of its ``compute_shards`` (the rest: tokenising, planning, the manifest);
    in the main thread, issuing each shard's forwards and waiting for the writers; in the writer
    threads, each shard's write (hash beside it) and the part of it spent in ``fsync``."""
    import bertology.store.compute as compute
    import bertology.store.extraction as extraction
    from bertology import atomic
    from bertology.store import extract

    spans: dict[str, list[float]] = {"compute_shards": [], "issue": [], "wait": [], "write": [], "fsync": []}

    def timed(key, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spans[key].append(time.perf_counter() - t)

        return wrapper

    patches = [
        (extraction, "compute_shards", timed("compute_shards", compute.compute_shards)),
        (compute, "compute_shard", timed("issue", compute.compute_shard)),
        (compute, "_finish", timed("wait", compute._finish)),
        (compute, "write_shard", timed("write", compute.write_shard)),
        (atomic.os, "fsync", timed("fsync", atomic.os.fsync)),
    ]
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in patches]
    where = Path(tempfile.mkdtemp(dir=root))
    try:
        for mod, name, fn in patches:
            setattr(mod, name, fn)
        sync()
        t = time.perf_counter()
        store = extract(lm, corpus, root=where, device=str(dev), progress=False, **options)
        sync()
        total = time.perf_counter() - t
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)
        shutil.rmtree(where, ignore_errors=True)
    out = {"total_s": total, "bytes": sum(store.manifest["shard_bytes"].values()), "shards": len(spans["write"])}
    for key, values in spans.items():
        out[f"{key}_s"] = sum(values)
    out["outside_compute_shards_s"] = total - out["compute_shards_s"]
    out["write_s_per_shard"] = [round(v, 4) for v in spans["write"]]
    log(
        "stages: "
        + ", ".join(
            f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in out.items() if not isinstance(v, list)
        )
    )
    return out


# --------------------------------------------------------------------------- pretraining


def part_pretrain() -> None:
    from bertology.pretraining import load_config
    from bertology.pretraining.runtime import setup_runtime

    fig = Figures("pretrain")
    dev = device()
    root = work() / "pretrain"
    steps, log_every = (6, 2) if ARGS.tiny else (ARGS.steps, 20)
    over = dict(
        run_name="prep",
        output_root=str(root),
        max_steps=steps,
        warmup_steps=2,
        log_every=log_every,
        eval_every=10**6,
        eval_batches=1,
        save_every=10**6,
        keep_steps=[],
        progress=False,
        device=dev.type,
        grad_accum_steps=1,
        max_documents=20 if ARGS.tiny else 150,
    )
    if ARGS.tiny:
        over.update(sizes(), vocab_size=2000, batch_size=8)
    cfg = load_config("bert_base_gpu", **over)
    fig.put(
        "config",
        {
            k: getattr(cfg, k)
            for k in (
                "num_hidden_layers",
                "hidden_size",
                "max_seq_len",
                "batch_size",
                "objective",
                "masking",
                "vocab_size",
                "max_steps",
            )
        },
    )
    rt = setup_runtime(cfg)
    prep = root / "prep"
    prep.mkdir(parents=True, exist_ok=True)
    n_warm, n_timed = (2, 4) if ARGS.tiny else (5, 40)
    tok, cpu_batches = _masked_batches(cfg, prep, rt, n_warm + n_timed)
    gpu_batches = [
        {k: v.to(dev) for k, v in _padded(b, cfg.max_seq_len, tok.pad_token_id).items()} for b in cpu_batches
    ]
    tokens = sum(int(b["attention_mask"].sum()) for b in cpu_batches[n_warm:])
    n_params = 0

    def minimal(compiled: bool) -> dict:
        nonlocal n_params
        out, n_params = _minimal_loop(cfg, tok, gpu_batches, n_warm, tokens, rt.autocast_dtype, compiled)
        return out

    def trainer(compiled: bool, accum: int = 1) -> dict:
        return _trainer_loop(over, root, prep, log_every, n_params, compiled, accum)

    _time_loops(fig, minimal, trainer)
    if dev.type == "cuda":
        fig.put("peak_memory_gib", torch.cuda.max_memory_allocated() / 2**30)


def _masked_batches(cfg, prep: Path, rt, n: int) -> tuple:
    """The recipe's tokenizer (trained or read in ``prep``) and its first ``n`` masked training batches
    (``input_ids, attention_mask, token_type_ids, labels``, on the CPU)."""
    from bertology.pretraining.data import (
        Masker,
        corpus_path,
        load_sequences,
        masked_batch,
        run_tokenizer,
        stream_indices,
    )
    from bertology.pretraining.text_corpus import corpus_hash

    source = corpus_path(cfg)
    tok = run_tokenizer(cfg, prep, source, rt)
    train, _ = load_sequences(cfg, prep, source, tok, rt, corpus_hash(source))
    masker = Masker(cfg, tok)
    cpu_batches = []
    for step in range(n):
        rows_, epochs = stream_indices(len(train), cfg.seed, step * cfg.batch_size, cfg.batch_size)
        b = masked_batch(train, rows_, epochs, masker, cfg, tok.pad_token_id)
        cpu_batches.append({k: b[k] for k in ("input_ids", "attention_mask", "token_type_ids", "labels")})
    return tok, cpu_batches


def _padded(b: dict, width: int, pad_token_id: int) -> dict:
    """``b`` padded to ``width`` tokens: one shape for every batch, compiled graphs are not rebuilt per width."""
    extra = width - b["input_ids"].shape[1]
    fill = {"input_ids": pad_token_id, "attention_mask": 0, "token_type_ids": 0, "labels": -100}
    return {k: torch.nn.functional.pad(v, (0, extra), value=fill[k]) if extra > 0 else v for k, v in b.items()}


def _minimal_loop(cfg, tok, gpu_batches: list, n_warm: int, tokens: int, amp, compiled: bool) -> tuple[dict, int]:
    """The minimal loop (forward, backward, AdamW step) over the pre-built batches, timed after
    ``n_warm`` of them: its tokens/s and MFU, and the model's parameter count."""
    from bertology.pretraining.objectives import build_model

    dev = device()
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, vocab_size=len(tok), pad_token_id=tok.pad_token_id).to(dev).train()
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    fwd = torch.compile(model) if compiled else model
    for i, b in enumerate(gpu_batches):
        if i == n_warm:
            sync()
            t = time.perf_counter()
        with torch.autocast(dev.type, dtype=amp or torch.float32, enabled=amp is not None):
            loss = fwd(**b).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    sync()
    s = time.perf_counter() - t
    out = {
        "tokens_per_s": tokens / s,
        "mfu_peak": 6 * n_params * tokens / s / H100_PEAK,
        "mfu_matmul": 6 * n_params * tokens / s / matmul_rate(),
    }
    return out, n_params


def _trainer_loop(
    over: dict, root: Path, prep: Path, log_every: int, n_params: int, compiled: bool, accum: int = 1
) -> dict:
    """``run_pretraining`` with the recipe and the overrides ``over`` (the prepared tokenizer and data
    copied in): its tokens/s after the first log window, the windows, and its MFU."""
    from bertology.pretraining import load_config, read_metrics, run_pretraining

    name = ("trainer-compiled" if compiled else "trainer") + (f"-accum{accum}" if accum > 1 else "")
    shutil.rmtree(root / name, ignore_errors=True)
    (root / name).mkdir(parents=True)
    for sub in ("tokenizer", "data"):
        if (prep / sub).is_dir():
            shutil.copytree(prep / sub, root / name / sub)
    kw = {"compile": True} if compiled else {}
    run_cfg = load_config("bert_base_gpu", **{**over, "run_name": name, "grad_accum_steps": accum, **kw})
    run_dir = run_pretraining(run_cfg, resume=False)
    m = read_metrics(run_dir)
    tps = m[(m.metric == "tokens_per_s") & (m.step > log_every)]["value"]
    mfu = m[(m.metric == "mfu") & (m.step > log_every)]["value"]
    out = {
        "tokens_per_s": float(tps.mean()),
        "windows": m[m.metric == "tokens_per_s"].value.round(0).tolist(),
        "mfu_peak": 6 * n_params * float(tps.mean()) / H100_PEAK,
        "mfu_logged": float(mfu.mean()) if len(mfu) else None,
    }
    shutil.rmtree(run_dir, ignore_errors=True)
    return out


def _time_loops(fig: Figures, minimal, trainer) -> None:
    """Each loop in turn while the budget lasts (``--skip`` leaves one out), its figures and ratio to
    the minimal loop recorded after each; a failure is recorded, not fatal."""
    rows: dict[str, dict] = {}
    for name, fn in [
        ("minimal loop", lambda: minimal(False)),
        ("workbench trainer", lambda: trainer(False)),
        ("minimal loop, torch.compile", lambda: minimal(True)),
        ("workbench trainer, compile: true", lambda: trainer(True)),
        # the recipe as written: 2 micro-batches of 128 sequences a step (one optimizer step per 256)
        ("workbench trainer, compile: true, grad_accum 2 (the recipe)", lambda: trainer(True, accum=2)),
    ]:
        if name in ARGS.skip:
            continue
        if left() < (60 if "compile" in name else 40):
            rows[name] = {"skipped": f"{left():.0f} s left"}
            continue
        try:
            rows[name] = fn()
            log(f"{name}: {rows[name]['tokens_per_s']:,.0f} tokens/s, MFU {100 * rows[name]['mfu_peak']:.1f}%")
        except Exception as exc:
            rows[name] = {"error": error_text(exc)}
            traceback.print_exc(limit=-6)
        base = rows.get("minimal loop", {}).get("tokens_per_s")
        for r in rows.values():
            if base and "tokens_per_s" in r:
                r["ratio_to_minimal"] = r["tokens_per_s"] / base
        fig.put("loops", rows)


# --------------------------------------------------------------------------- report


def part_report() -> None:
    out = Path(ARGS.out)
    setup = json.loads((out / "gpu-setup.json").read_text()) if (out / "gpu-setup.json").is_file() else {}
    print(f"device: {setup.get('versions')}; bf16 matmul {setup.get('matmul_bf16_flop_per_s', 0) / 1e12:.0f} TFLOP/s")
    print("| path | throughput | ratio | MFU (of 989T / of matmul) |\n|---|---|---|---|")
    ext = json.loads((out / "gpu-extract.json").read_text()) if (out / "gpu-extract.json").is_file() else {}
    for name, r in ext.get("paths", {}).items():
        ratio = (f"{r['ratio_to_bare']:.2f}x bare" if "ratio_to_bare" in r else "-") + (
            f", {r['ratio_to_disk']:.2f}x disk ({r['binding']} binds)" if "ratio_to_disk" in r else ""
        )
        print(
            f"| {name} | {r['words_per_s']:,.0f} words/s | {ratio} | {100 * r['mfu_peak']:.1f}% / "
            f"{100 * r['mfu_matmul']:.1f}% |"
        )
    if "disk_write_bytes_per_s" in ext:
        print(f"| disk write + fsync | {ext['disk_write_bytes_per_s'] / 1e9:.2f} GB/s | - | - |")
    stages = ext.get("stages", {})
    if "total_s" in stages:
        print(
            f"| store stages ({stages['shards']} shards, {stages['bytes'] / 1e9:.2f} GB) | total "
            f"{stages['total_s']:.3f} s = outside the shards {stages['outside_compute_shards_s']:.3f} s + shards "
            f"{stages['compute_shards_s']:.3f} s (issuing forwards {stages['issue_s']:.3f} s, waiting for writers "
            f"{stages['wait_s']:.3f} s); writer threads {stages['write_s']:.3f} s, fsync {stages['fsync_s']:.3f} s | - | - |"
        )
    off = ext.get("writers_off", {})
    if "seconds" in off:
        print(
            f"| store, writers off (forwards, pooling, copies to the host; nothing written) | "
            f"{off['seconds']:.3f} s, {off['bytes'] / 1e9:.2f} GB = {off['bytes_per_s'] / 1e9:.2f} GB/s | - | - |"
        )
    trace = ext.get("trace", {})
    if "wall_s" in trace:
        waits = ", ".join(f"{k} {v['calls']}x {v['self_cpu_s']:.3f} s" for k, v in trace["waiting_calls"].items())
        print(
            f"| store under torch.profiler | wall {trace['wall_s']:.3f} s, device busy {trace['device_busy_s']:.3f} s; "
            f"host waits: {waits or 'none'} | - | - |"
        )
    pre = json.loads((out / "gpu-pretrain.json").read_text()) if (out / "gpu-pretrain.json").is_file() else {}
    for name, r in pre.get("loops", {}).items():
        if "tokens_per_s" in r:
            print(
                f"| pretraining: {name} | {r['tokens_per_s']:,.0f} tokens/s | "
                f"{r.get('ratio_to_minimal', 0):.2f}x minimal | {100 * r['mfu_peak']:.1f}% |"
            )
        else:
            print(f"| pretraining: {name} | {r} | - | - |")


def main() -> None:
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("part", choices=["setup", "extract", "pretrain", "report"])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu-out"))
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "bertology-gpu-bench"))
    ap.add_argument("--budget", type=float, default=150.0)
    ap.add_argument("--sentences", type=int, default=2000)
    ap.add_argument("--large-sentences", type=int, default=8000)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--skip", action="append", default=[], help="pretrain: leave out the loop of this name")
    ARGS = ap.parse_args()
    os.environ.setdefault("BERTOLOGY_HOME", str(Path(ARGS.work) / "home"))
    {"setup": part_setup, "extract": part_extract, "pretrain": part_pretrain, "report": part_report}[ARGS.part]()


if __name__ == "__main__":
    sys.exit(main())
