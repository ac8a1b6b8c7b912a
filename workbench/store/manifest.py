"""A store's ``manifest.json``: written last (its presence means the store is complete), it lists
every shard's size and sha256 and carries its own checksum (``manifest_sha256``), so an edited
count is refused, not misread. :func:`read_manifest` validates every field, naming the bad one."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from bertology.errors import StoreError

SHARD_NAME = re.compile(r"^shard-\d{5}\.safetensors$")


def shard_name(k: int) -> str:
    """File name of shard ``k``: ``shard-NNNNN.safetensors``."""
    return f"shard-{k:05d}.safetensors"


def manifest_checksum(manifest: dict) -> str:
    """sha256 of the manifest's content without its own ``manifest_sha256`` field."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def _is_int(value: object, minimum: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def validate_manifest(manifest: object, file: Path) -> None:
    """Refuse a manifest whose fields are missing, mistyped, inconsistent or edited, naming the field."""
    redo = "run extract again with the same model, corpus and settings to rebuild it"

    def bad(field: str, why: str) -> StoreError:
        return StoreError(f"{file}: field {field!r} {why}; {redo}")

    if not isinstance(manifest, dict):
        raise StoreError(f"{file}: expected a JSON object, found {type(manifest).__name__}; {redo}")
    for field in (
        "version",
        "n_layers",
        "n_heads",
        "dim",
        "n_sentences",
        "settings",
        "word_counts",
        "shards",
        "plan",
        "model",
        "corpus",
    ):
        if field not in manifest:
            raise bad(field, "is missing")
    for field in ("version", "n_layers", "n_heads", "dim", "n_sentences"):
        if not _is_int(manifest[field], 1):
            raise bad(field, f"must be a positive integer, not {manifest[field]!r}")
    settings = manifest["settings"]
    if not isinstance(settings, dict) or not isinstance(settings.get("attentions"), bool):
        raise bad("settings", "must be an object with a boolean 'attentions'")
    n_sentences = manifest["n_sentences"]
    counts, shards, plan = manifest["word_counts"], manifest["shards"], manifest["plan"]
    if not isinstance(counts, list) or len(counts) != n_sentences or not all(_is_int(c) for c in counts):
        raise bad("word_counts", f"must list one non-negative count per sentence ({n_sentences})")
    if not isinstance(shards, list) or not all(isinstance(n, str) and SHARD_NAME.match(n) for n in shards):
        raise bad("shards", "must list file names shard-NNNNN.safetensors")
    if (
        not isinstance(plan, list)
        or len(plan) != len(shards)
        or not all(isinstance(p, list) and all(_is_int(i) for i in p) for p in plan)
        or sorted(i for p in plan for i in p) != list(range(n_sentences))
    ):
        raise bad("plan", "must split the sentences 0..n_sentences-1 into one list per shard")
    if manifest["version"] >= 3:  # checksummed stores
        for field in ("shard_sha256", "shard_bytes", "manifest_sha256"):
            if field not in manifest:
                raise bad(field, "is missing")
        digests, sizes = manifest["shard_sha256"], manifest["shard_bytes"]
        if (
            not isinstance(digests, dict)
            or set(digests) != set(shards)
            or not isinstance(sizes, dict)
            or set(sizes) != set(shards)
            or not all(_is_int(v) for v in sizes.values())
        ):
            raise bad("shard_sha256", "and 'shard_bytes' must name every shard")
        if manifest["manifest_sha256"] != manifest_checksum(manifest):
            raise StoreError(
                f"{file}: edited or damaged (its content no longer matches its checksum "
                f"'manifest_sha256', e.g. a changed count); {redo}"
            )


def read_manifest(path: str | Path) -> dict:
    """The validated manifest of the store at ``path`` (:class:`StoreError` naming the field otherwise)."""
    file = Path(path) / "manifest.json"
    if not file.is_file():
        raise StoreError(f"{Path(path)}: not a complete feature store (no manifest.json)")
    try:
        manifest = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StoreError(f"{file}: corrupt manifest: {exc}; run extract again to rebuild it") from exc
    validate_manifest(manifest, file)
    return manifest
