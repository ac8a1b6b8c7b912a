"""Content fingerprints of everything a cached result depends on.

A feature store is keyed on the model's weights and config, its tokenizer and the corpus content; a
study run id on its config, seed, the content of every model / corpus / file its config names and
the workbench version. Identical inputs give the same key (so a killed run resumes), and an edited
weight file, tokenizer or corpus gives a new one (so nothing computed from the old content is
reused).

Hashing weights is the costly part (sha256 reads about 0.85 GB/s on the EPYC CPU this was written
on): file digests are cached by (path, size, mtime, inode), in memory and in
``$BERTOLOGY_HOME/file-digests.json``, so a file is read again only after it changed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from bertology import atomic, paths

_memory: dict[str, str] = {}
_disk_loaded: set[str] = set()


def _cache_file() -> Path:
    return paths.home() / "file-digests.json"


def _load_disk_cache() -> None:
    cache = _cache_file()
    if str(cache) in _disk_loaded:
        return
    _disk_loaded.add(str(cache))
    try:
        data = json.loads(cache.read_text())
        if isinstance(data, dict):
            _memory.update({k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)})
    except (OSError, ValueError):
        pass  # no cache yet, or a damaged one: digests are recomputed


def _save_disk_cache() -> None:
    try:
        atomic.write_json(_cache_file(), _memory)
    except OSError:
        pass  # a read-only home only costs the re-hash next time


def file_digest(path: str | os.PathLike) -> str:
    """sha256 hex digest of a file's bytes, cached by (resolved path, size, mtime, inode)."""
    from bertology.models import file_sha256

    path = Path(path).resolve()
    stat = path.stat()
    key = f"{path}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ino}"
    if key not in _memory:
        _load_disk_cache()
    if key not in _memory:
        _memory[key] = file_sha256(path)
        _save_disk_cache()
    return _memory[key]


def files_digest(files: Iterable[Path], root: Path) -> str:
    """One sha256 over ``(path relative to root, file digest)`` of each file, in sorted order."""
    h = hashlib.sha256()
    for f in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        h.update(f"{f.relative_to(root).as_posix()}\0{file_digest(f)}\n".encode())
    return h.hexdigest()


def folder_digest(folder: str | os.PathLike, *, recursive: bool = True) -> str:
    """Digest of every regular file under ``folder`` (hidden names -- temporary files -- skipped)."""
    folder = Path(folder)
    walk = folder.rglob("*") if recursive else folder.iterdir()
    files = [p for p in walk if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)]
    return files_digest(files, folder)


def model_dir_digest(folder: str | os.PathLike) -> str:
    """Digest of a model directory's own files (weights, config, tokenizer files, ...), not subfolders."""
    return folder_digest(folder, recursive=False)


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """sha256 of what decides a tokenizer's output: its full (Rust) definition -- vocabulary,
    normaliser (lower-casing, accents), pre-tokeniser, post-processor -- and the Python-side
    settings (class, maximum length, special tokens, prefix space).

    Computed from the loaded object, so it covers in-memory tokenizers too. The backend's current
    truncation / padding state is left out: it is set by whichever call ran last, not by the files.
    """
    record: dict[str, Any] = {
        "class": type(tokenizer).__name__,
        "model_max_length": int(min(getattr(tokenizer, "model_max_length", 0) or 0, 2**62)),
        "special_tokens": {k: str(v) for k, v in sorted(getattr(tokenizer, "special_tokens_map", {}).items())},
        "add_prefix_space": getattr(tokenizer, "add_prefix_space", None),
    }
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        raw = backend.to_str()
        # canonical JSON of a 30k-piece vocabulary takes ~50 ms; the same definition is hashed once
        seen = hashlib.sha256((json.dumps(record, sort_keys=True, default=str) + raw).encode()).hexdigest()
        if seen not in _TOKENIZER_FINGERPRINTS:
            definition = json.loads(raw)
            definition.pop("truncation", None)
            definition.pop("padding", None)
            record["backend"] = definition
            _TOKENIZER_FINGERPRINTS[seen] = hashlib.sha256(
                json.dumps(record, sort_keys=True, default=str).encode()
            ).hexdigest()
        return _TOKENIZER_FINGERPRINTS[seen]
    # a slow tokenizer: its vocabulary and class settings
    record["vocab"] = sorted(tokenizer.get_vocab().items())
    record["init"] = {k: str(v) for k, v in sorted(getattr(tokenizer, "init_kwargs", {}).items())}
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()


_TOKENIZER_FINGERPRINTS: dict[str, str] = {}  # digest of (settings, raw definition) -> fingerprint


# --------------------------------------------------------------------------- inputs named by a config


def files_input_digest(kind: str, files: Sequence[str | os.PathLike], **info: str) -> dict[str, str]:
    """``{"kind", "path", "sha256", **info}`` of an input made of named files (a vector package's
    vector table, a dictionary's index and data files).

    ``sha256`` covers each file's name and content digest (:func:`file_digest`, cached by path, size,
    mtime and inode) and ``info`` (e.g. a package's ``name`` and ``version``); ``path`` is the
    files' common folder, recorded but left out of a run id. A missing file is an error of the
    analysis that reads it, so it raises ``FileNotFoundError`` here too.
    """
    paths_ = [Path(f).resolve() for f in files]
    if not paths_:
        raise ValueError(f"files_input_digest({kind!r}): no files")
    root = Path(os.path.commonpath([str(f.parent) for f in paths_]))
    h = hashlib.sha256(json.dumps(info, sort_keys=True).encode())
    h.update(files_digest(paths_, root).encode())
    return {"kind": kind, "path": str(root), "sha256": h.hexdigest(), **info}


def input_digest(value: str) -> dict[str, str] | None:
    """``{"kind", "path", "sha256"}`` of what a config string names, or None when it names no file.

    A bundled corpus name -> its file; a shipped release or a pretraining run (``name``, without a
    step) -> every file of its folder; any other model name (``minilm-l6``, ``run@step``, a hub name
    already in the hub cache: ``revision`` its commit) or a model directory -> the directory's own files; another existing file or folder -> its content.
    """
    from bertology.corpus import bundled_corpora
    from bertology.errors import WorkbenchError
    from bertology.hub import snapshot_commit
    from bertology.models import resolve, shipped_releases

    if not value or "\n" in value:
        return None
    bundled = bundled_corpora()
    if value in bundled and bundled[value].is_file():
        return {"kind": "corpus", "path": str(bundled[value]), "sha256": file_digest(bundled[value])}
    releases = shipped_releases()
    if value in releases:
        folder = releases[value]["path"]
        return {"kind": "release", "path": str(folder), "sha256": folder_digest(folder)}
    run_folder = paths.models_dir() / value
    if "/" not in value and "@" not in value and run_folder.is_dir():
        return {"kind": "pretraining run", "path": str(run_folder), "sha256": folder_digest(run_folder)}
    path = Path(value).expanduser()
    if path.is_file():
        return {"kind": "file", "path": str(path.resolve()), "sha256": file_digest(path)}
    try:
        _, model_dir = resolve(value, offline=True)  # never the network for a config's every string
    except (WorkbenchError, OSError, ValueError):
        model_dir = None
    if model_dir is not None and (Path(model_dir) / "config.json").is_file():
        digest = {"kind": "model", "path": str(model_dir), "sha256": model_dir_digest(model_dir)}
        commit = snapshot_commit(model_dir)
        return digest if commit is None else {**digest, "revision": commit}  # a hub model's commit
    if path.is_dir():
        return {"kind": "folder", "path": str(path.resolve()), "sha256": folder_digest(path)}
    return None


def input_fingerprints(config: dict[str, Any]) -> dict[str, Any]:
    """``{field: digest}`` (a list for list fields) of every config field whose value names a
    model, corpus, release, file or folder (:func:`input_digest`); other fields are left out."""
    out: dict[str, Any] = {}
    for key in sorted(config):
        value = config[key]
        if isinstance(value, str):
            digest = input_digest(value)
            if digest is not None:
                out[key] = digest
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
            digests = [input_digest(v) for v in value]
            if any(d is not None for d in digests):
                out[key] = digests
    return out
