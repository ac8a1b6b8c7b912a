""":func:`extract`: the feature store of a model over a corpus, computed once and kept on disk.

It reads top to bottom: the settings and the store's key; a complete, sound store is reopened;
otherwise the plan, and under the folder's lock (rank 0 holds it from planning to manifest) the
shards still to compute, this process's share of them, and the manifest. Under ``torchrun`` every
process runs the same function (:mod:`bertology.distributed`).
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

from bertology import atomic, distributed, paths
from bertology.corpus import Corpus
from bertology.errors import StoreError
from bertology.features import LongPolicy, Pooling
from bertology.models import LoadedModel
from bertology.runtime import release_free_memory, resolve_precision
from bertology.store.compute import compute_shards
from bertology.store.manifest import manifest_checksum
from bertology.store.plan import ExtractionPlan, plan_extraction, prepare_folder
from bertology.store.read import FeatureStore
from bertology.store.settings import STORE_VERSION, ExtractionSettings, key_record, store_key
from bertology.store.verify import DAMAGED_MARK, read_checksum
from bertology.store.write import estimated_bytes, write_error

logger = logging.getLogger(__name__)


def extract(
    lm: LoadedModel,
    corpus: Corpus,
    *,
    pooling: Pooling = "first",
    attentions: bool = True,
    long_policy: LongPolicy = "error",
    batch_tokens: int = 1024,
    shard_size: int = 256,
    amp_dtype: str | None = None,
    storage: str = "float32",
    root: str | Path | None = None,
    device: str | None = None,
    progress: bool = True,
    verify: bool = False,
    force: bool = False,
    wait: bool = True,
) -> FeatureStore:
    """Extract (or reopen) the store of ``lm`` over ``corpus``; resumes a killed run, repairs a damaged one.

    pooling: subword→word pooling of hidden states (first / last / mean piece).
    attentions: also keep word-level attention maps and, per sentence and head, the counts of the
    token-level attention argmax's relative offset (:meth:`FeatureStore.token_offsets`; needs an
    eager-attention model).
    long_policy: sentences longer than the model accepts raise (``"error"``, naming the sentence) or
    are split into overlapping sliding windows (``"window"``, hidden states only).
    amp_dtype: compute in ``"bfloat16"`` / ``"float16"`` autocast (linear layers' weights cast once
    for the run; layer norms and softmax stay float32) -- faster on GPUs and CPUs with bf16 units
    (AMX), at about 3 significant digits; ``"auto"``: bfloat16 where a measured micro-benchmark
    finds it faster on this machine, else float32 (:func:`bertology.runtime.resolve_precision`;
    the store records the dtype used); an explicit dtype measured slower than float32 warns. None
    (default) computes in float32, equal to a plain HF forward pass.
    storage: on-disk dtype, ``"float32"`` (default) or ``"float16"`` (half the disk and I/O; reads
    return float32; values beyond float16's range are refused, not clipped).
    verify: hash every shard of an existing store (not just sizes) and recompute what is altered.
    force: delete the store's files and compute it again.
    wait: when another process is extracting the same store, wait for it (default) or raise.

    The store is keyed on the model's weights and config, its tokenizer, the corpus content and
    the settings. Under ``torchrun`` (an initialised process group) the shards are split across
    the ranks: see :mod:`bertology.distributed`.
    """
    group = distributed.current_group()
    if amp_dtype in ("auto", "bfloat16", "float16"):  # auto: bfloat16 only where measured faster
        # called here, not in a helper: its warning names the caller of extract
        low = resolve_precision(amp_dtype, device or next(lm.model.parameters()).device, what="extraction")
        amp_dtype = group.broadcast(str(low).removeprefix("torch.") if low is not None else None)  # rank 0's choice
    settings = ExtractionSettings(pooling, attentions, long_policy, batch_tokens, shard_size, amp_dtype, storage)
    settings.validate()
    _check_inputs(lm, corpus, settings)
    record = key_record(lm, corpus.fingerprint, settings)
    key = store_key(lm, record["corpus"], settings, tokenizer=record["tokenizer"])
    path = (Path(root) if root is not None else paths.stores_dir()) / key
    hash_every_shard = verify or (path / DAMAGED_MARK).is_file()  # a reader found an altered shard
    if not (force or hash_every_shard):
        store = _reopen_complete_store(path, group)
        if store is not None:
            return store

    plan = plan_extraction(lm, corpus, settings, record)
    with ExitStack() as folder_lock:  # rank 0 holds the lock until the manifest is written
        to_compute = group.run_on_main(
            lambda: _lock_and_prepare(
                folder_lock, path, plan, lm, settings, force=force, verify=hash_every_shard, wait=wait
            )
        )
        if to_compute is None:
            return FeatureStore(path)
        started = time.perf_counter()
        _compute_share(lm, plan, to_compute, settings, path, device, progress, group)
        group.run_on_main(lambda: _write_manifest(path, lm, corpus, settings, plan, started, group.world_size))
        release_free_memory()  # the batches' activations are freed: the analysis after it starts low
    return FeatureStore(path)


def _check_inputs(lm: LoadedModel, corpus: Corpus, settings: ExtractionSettings) -> None:
    """Refuse an empty corpus, and attention maps from a model without eager attention."""
    if len(corpus) == 0:
        raise StoreError(f"corpus {corpus.name!r} has no sentences")
    if settings.attentions and getattr(lm.config, "_attn_implementation", "eager") != "eager":
        raise StoreError(
            f"{lm.name}: attention maps need attn_implementation='eager' (load_model(..., attentions=True))"
        )


def _reopen_complete_store(path: Path, group: distributed.Group) -> FeatureStore | None:
    """The store at ``path`` if it is complete and its manifest and shard sizes are sound; None
    when it is missing or damaged (then the extraction repairs it)."""
    if not (path / "manifest.json").is_file():
        return None
    try:
        return FeatureStore(path)
    except StoreError as exc:
        if group.is_main:
            logger.warning("%s", str(exc).split(". Run")[0])  # repaired by the extraction
        return None


def _lock_and_prepare(
    folder_lock: ExitStack,
    path: Path,
    plan: ExtractionPlan,
    lm: LoadedModel,
    settings: ExtractionSettings,
    *,
    force: bool,
    verify: bool,
    wait: bool,
) -> list[int] | None:
    """Take the folder's lock (held by ``folder_lock`` until it closes), then
    :func:`~bertology.store.plan.prepare_folder`: the shards still to compute, None when the store
    is complete and sound."""
    try:
        folder_lock.enter_context(atomic.folder_lock(path, wait=wait, on_wait=logger.warning))
    except atomic.LockHeld as exc:
        raise StoreError(str(exc)) from None
    try:
        return prepare_folder(path, plan, force=force, verify=verify)
    except OSError as exc:
        every_shard = [plan.shard_word_counts(k) for k in range(len(plan.shards))]
        raise write_error(path, exc, estimated_bytes(lm, settings, every_shard)) from exc


def _compute_share(
    lm: LoadedModel,
    plan: ExtractionPlan,
    to_compute: list[int],
    settings: ExtractionSettings,
    path: Path,
    device: str | None,
    progress: bool,
    group: distributed.Group,
) -> None:
    """Compute and write this rank's share of the shards ``to_compute`` (split by cost); every rank
    raises when any rank failed."""
    costs = [plan.padded_tokens(k) for k in to_compute]
    assigned = distributed.assign_shards(to_compute, costs, group.world_size)[group.rank]
    done = len(plan.word_counts) - sum(len(plan.shards[k]) for k in to_compute)
    error: BaseException | None = None
    try:
        compute_shards(lm, plan, assigned, settings, path, device, progress and group.is_main, done=done)
    except OSError as exc:
        error = write_error(path, exc, estimated_bytes(lm, settings, [plan.shard_word_counts(k) for k in assigned]))
        error.__cause__ = exc
    except Exception as exc:  # noqa: BLE001 -- reported on every rank, then raised
        error = exc
    group.raise_if_any_failed(error)


def _write_manifest(
    path: Path,
    lm: LoadedModel,
    corpus: Corpus,
    settings: ExtractionSettings,
    plan: ExtractionPlan,
    started: float,
    processes: int,
) -> None:
    """Write ``manifest.json`` (which makes the store complete) once every shard and its checksum
    are on disk; ``started``: ``time.perf_counter()`` when computing began."""
    missing = [n for n in plan.shard_names if read_checksum(path / n) is None or not (path / n).is_file()]
    if missing:
        raise StoreError(f"{path}: shards {missing[:3]} were not written; run extract again")
    manifest = {
        "version": STORE_VERSION,
        "key": plan.record,
        "model": {**lm.record(), "tokenizer_fingerprint": plan.record["tokenizer"]},
        "corpus": {
            "name": corpus.name,
            "path": corpus.path,
            "fingerprint": plan.record["corpus"],
            "sources": corpus.sources,
        },
        "settings": asdict(settings),
        "n_layers": lm.num_layers + 1,
        "n_heads": lm.num_heads,
        "dim": lm.hidden_size,
        "n_sentences": len(corpus),
        "word_counts": plan.word_counts.tolist(),
        "shards": plan.shard_names,
        "plan": plan.shards,
        "shard_bytes": {n: (path / n).stat().st_size for n in plan.shard_names},
        "shard_sha256": {n: read_checksum(path / n) for n in plan.shard_names},
        "extract_seconds_last_run": round(time.perf_counter() - started, 3),
        "extract_processes_last_run": processes,
    }
    manifest["manifest_sha256"] = manifest_checksum(manifest)
    try:
        atomic.write_json(path / "manifest.json", manifest)
    except OSError as exc:
        raise write_error(path, exc, 1 << 20) from exc
    (path / DAMAGED_MARK).unlink(missing_ok=True)
