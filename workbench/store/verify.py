"""Is a store sound? Checksum files, shard checks, damage marks, :func:`verify_store`.

What is checked when:

- opening a store (:class:`~bertology.store.FeatureStore`, and :func:`~bertology.store.extract`
  finding a complete store): the manifest's fields and checksum, and every shard's size (one
  ``stat`` each: cheap at any size);
- the first read of a shard in a process: its sha256, remembered while the file's size, mtime and
  inode stay the same (so a store is hashed at most once per process, and only the shards an
  analysis touches);
- resuming an extraction: every finished shard's sha256 against its ``.sha256`` file;
- ``extract(..., verify=True)`` / ``bertology extract --verify`` / :func:`verify_store`: every shard.

A damaged shard found by a reader or by :func:`verify_store` leaves a ``.damaged`` mark, so the
next extraction hashes every shard and recomputes the damaged ones.
"""

from __future__ import annotations

import re
from pathlib import Path

from safetensors import safe_open

from bertology import atomic
from bertology.errors import StoreError
from bertology.models import file_sha256
from bertology.store.manifest import read_manifest

CHECKSUM_SUFFIX = ".sha256"
DAMAGED_MARK = ".damaged"
_verified: dict[tuple[str, int, int, int], str] = {}  # shards hashed by this process: (path, size, mtime, inode)


# --------------------------------------------------------------------------- checksum files


def checksum_file(shard: Path) -> Path:
    """``shard-NNNNN.safetensors.sha256`` beside the shard."""
    return shard.parent / (shard.name + CHECKSUM_SUFFIX)


def read_checksum(shard: Path) -> str | None:
    """The sha256 recorded beside ``shard``, or None when it is missing or malformed."""
    try:
        digest = checksum_file(shard).read_text().split()[0]
    except (OSError, IndexError):
        return None
    return digest if re.fullmatch(r"[0-9a-f]{64}", digest) else None


def write_checksum(shard: Path, digest: str) -> None:
    """Record ``digest`` beside ``shard`` in ``sha256sum -c`` format, atomically."""
    atomic.write_text(checksum_file(shard), f"{digest}  {shard.name}\n")


# --------------------------------------------------------------------------- shards this process hashed


def _verification_key(shard: Path) -> tuple[str, int, int, int]:
    """What must stay the same for a shard this process hashed to count as verified."""
    stat = shard.stat()
    return str(shard.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino


def remember_verified(shard: Path, digest: str) -> None:
    """Count ``digest`` (computed from the bytes just written) as this process's hash of ``shard``."""
    _verified[_verification_key(shard)] = digest


def _verified_digest(shard: Path) -> str:
    """sha256 of a shard, hashed at most once per process while its size and mtime stay the same."""
    key = _verification_key(shard)
    if key not in _verified:
        _verified[key] = file_sha256(shard)
    return _verified[key]


# --------------------------------------------------------------------------- shard checks


def shard_problem(shard: Path, manifest: dict, *, full: bool, fresh: bool = False) -> str | None:
    """What is wrong with one shard of a complete store, or None: missing, wrong size, or (``full``)
    a sha256 that differs from the manifest's (``fresh``: re-read even if this process hashed it)."""
    if not shard.is_file():
        return "missing"
    if "shard_bytes" not in manifest:  # a store written before checksums (version < 3)
        return None
    size, expected = shard.stat().st_size, manifest["shard_bytes"][shard.name]
    if size != expected:
        return f"{size} bytes instead of {expected} (truncated or overwritten)"
    digest = (file_sha256(shard) if fresh else _verified_digest(shard)) if full else None
    if full and digest != manifest["shard_sha256"][shard.name]:
        return "contents altered (sha256 differs from the manifest's)"
    return None


def shard_problems(path: str | Path, manifest: dict, *, full: bool, fresh: bool = False) -> list[tuple[str, str]]:
    """``[(shard name, problem)]`` of a complete store: sizes only, or every sha256 with ``full``
    (``fresh``: re-read every byte, whatever this process hashed before)."""
    path = Path(path)
    problems = []
    for name in manifest["shards"]:
        problem = shard_problem(path / name, manifest, full=full, fresh=fresh)
        if problem:
            problems.append((name, problem))
    return problems


def finished_shard_is_sound(shard: Path, sentence_ids: list[int]) -> bool:
    """A finished shard of an unfinished store: its bytes match its ``.sha256`` file (read afresh)
    and it holds the planned sentences."""
    expected = read_checksum(shard)
    if expected is None or not shard.is_file() or file_sha256(shard) != expected:
        return False
    try:
        with safe_open(str(shard), framework="pt") as handle:
            return handle.get_tensor("sentence_ids").tolist() == sentence_ids
    except Exception:
        return False


# --------------------------------------------------------------------------- damage


def mark_damaged(path: Path, problems: list[tuple[str, str]]) -> None:
    """Leave a note for the next :func:`~bertology.store.extract`, which then hashes every shard and
    repairs (best effort: a read-only store just stays unmarked)."""
    try:
        atomic.write_text(path / DAMAGED_MARK, "".join(f"{name}: {problem}\n" for name, problem in problems))
    except OSError:
        pass


def damage_message(path: Path, problems: list[tuple[str, str]]) -> str:
    """The error for a damaged store: the first five problems, and how to repair."""
    listed = "; ".join(f"{name}: {problem}" for name, problem in problems[:5])
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    return (
        f"{path}: damaged feature store -- {listed}{more}. Run extract again with the same model, "
        f"corpus and settings (bertology extract ...; add --verify / verify=True to hash every shard): it "
        f"recomputes exactly the damaged shards"
    )


def _no_manifest_message(path: Path) -> str:
    """Why a folder without ``manifest.json`` is not a store: an extraction that has not finished (it holds
    its plan or shards: running it again resumes), or a folder that holds no store at all."""
    started = [f.name for f in (path / "plan.json", *sorted(path.glob("shard-*"))) if f.is_file()]
    if started:
        return (
            f"{path}: an unfinished extraction, not a damaged store (no manifest.json yet; "
            f"{len(started)} plan/shard file(s) written): run `bertology extract` again with the same model, "
            f"corpus and settings to resume it"
        )
    held = sum(1 for _ in path.iterdir())
    return (
        f"{path}: not a feature store (no manifest.json; the folder holds {held} other file(s)); "
        f"a store is the folder `bertology extract` prints"
    )


def verify_store(path: str | Path) -> list[tuple[str, str]]:
    """Check a store completely (manifest, then every shard's size and sha256); ``[(file, problem)]``,
    empty when sound. Repair with :func:`~bertology.store.extract` (same model, corpus and settings).
    A path that does not exist, is not a folder or holds no ``manifest.json`` raises ``StoreError`` (nothing
    there to be damaged: no store, or an extraction that has not finished and resumes when run again)."""
    path = Path(path)
    if not path.exists():
        raise StoreError(
            f"{path}: no such feature store (the folder does not exist; `bertology extract` prints a store's path)"
        )
    if not path.is_dir():
        raise StoreError(f"{path}: not a feature store folder (a store is the folder `bertology extract` prints)")
    if not (path / "manifest.json").is_file():
        raise StoreError(_no_manifest_message(path))
    try:
        manifest = read_manifest(path)
    except StoreError as exc:
        return [("manifest.json", str(exc))]
    problems = shard_problems(path, manifest, full=True, fresh=True)
    if problems:
        mark_damaged(path, problems)
    return problems
