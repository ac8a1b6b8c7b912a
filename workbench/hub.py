"""Models named by their Hugging Face hub id (``org/name``, the legacy ``bert-base-uncased``,
``NAME@REV`` for a branch, tag or commit), found through :mod:`huggingface_hub`.

:func:`bertology.models.resolve` comes here when a name is none of the registry's names and no
folder. The hub's own cache is looked in first (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
``~/.cache/huggingface/hub``, read when called); a download follows unless offline
(``HF_HUB_OFFLINE=1``, ``bertology --offline``, ``offline=True``). Only ``config.json``, the
tokenizer files and the safetensors weights are fetched: never pickled weights, never code. A
cached branch or tag is used as cached (no network): ``bertology models pull NAME`` moves it to the
hub's current commit. The commit of the snapshot folder a model is loaded from
(:func:`snapshot_commit`) is the model's ``revision``: it is recorded with the model and enters its
fingerprint, so a store extracted from one commit is never reused for another.

Errors are :class:`HubError` (a :class:`~bertology.errors.ModelError`), one line each: a missing
repository, a missing revision, a repository without safetensors, a gated one, an unreachable hub,
offline with nothing cached.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertology.errors import ModelError

WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
CONFIG = "config.json"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
)  # what AutoTokenizer reads from a folder; nothing here is code or pickle
PICKLED_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".h5", ".msgpack")  # never fetched
# how every --model option, config field and page names what it takes (one wording everywhere)
MODEL_NAME_HELP = "registry name, model folder, or Hugging Face hub name (org/name[@revision])"
_REPO_ID = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9_.-]*/)?[A-Za-z0-9][A-Za-z0-9_.-]*")
_COMMIT = re.compile(r"[0-9a-f]{40}")


class HubError(ModelError):
    """A hub name that could not be used for a reason of the hub's (a missing revision, no
    safetensors, a gated repository, no connection, offline with nothing cached)."""


@dataclass(frozen=True)
class HubName:
    """A hub model name: ``repo_id`` (``org/name`` or a legacy ``name``) and the ``revision`` written
    after ``@`` (a branch, tag or commit; None: the default branch, ``main``)."""

    repo_id: str
    revision: str | None = None

    @property
    def ref(self) -> str:
        """The revision to look up: the one written, else ``main``."""
        return self.revision or "main"

    def __str__(self) -> str:
        return self.repo_id if self.revision is None else f"{self.repo_id}@{self.revision}"


def parse_name(name: str) -> HubName | None:
    """``NAME[@REV]`` as a :class:`HubName`, None when ``NAME`` cannot be a hub repository id (a
    path such as ``./x`` or ``/x/y``, two slashes, ``--`` or ``..``, over 96 characters)."""
    repo_id, at, revision = str(name).partition("@")
    if at and not revision.strip():
        return None
    if len(repo_id) > 96 or not _REPO_ID.fullmatch(repo_id) or "--" in repo_id or ".." in repo_id:
        return None
    if repo_id.endswith((".", "-")) or repo_id.endswith(".git"):
        return None
    return HubName(repo_id, revision or None)


# --------------------------------------------------------------------------- settings, read when called


def cache_dir() -> Path:
    """The hub cache: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else huggingface_hub's default
    (environment read now, so a change after import counts)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.path.expandvars(os.environ["HF_HUB_CACHE"])).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.path.expandvars(os.environ["HF_HOME"])).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE).expanduser()


def endpoint() -> str:
    """The hub's address: ``HF_ENDPOINT`` (read now), else huggingface_hub's."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def is_offline(offline: bool | None = None) -> bool:
    """``offline`` when given, else whether ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set
    to a true value now."""
    if offline is not None:
        return bool(offline)
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in ("1", "ON", "YES", "TRUE")


def snapshot_commit(path: str | os.PathLike | None) -> str | None:
    """The commit hash of a snapshot folder of the hub cache (``.../models--org--name/snapshots/<commit>``),
    None for any other folder."""
    if path is None:
        return None
    path = Path(path)
    if path.parent.name == "snapshots" and path.parent.parent.name.startswith("models--"):
        if _COMMIT.fullmatch(path.name):
            return path.name
    return None


# --------------------------------------------------------------------------- the cache


def _loadable(folder: Path) -> bool:
    """Whether a snapshot holds a config and safetensors weights (what :func:`fetch` downloads)."""
    return (folder / CONFIG).is_file() and ((folder / WEIGHTS).is_file() or (folder / WEIGHTS_INDEX).is_file())


def cached(name: HubName, *, loadable: bool = True) -> Path | None:
    """The snapshot folder of ``name`` in the hub cache (``refs/<branch or tag>`` or
    ``snapshots/<commit>``, through ``snapshot_download(local_files_only=True)``), None when it is
    not there or (``loadable``) holds no config and safetensors weights. No network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = snapshot_download(
            name.repo_id,
            revision=name.ref,
            cache_dir=cache_dir(),
            local_files_only=True,
            allow_patterns=[CONFIG],
        )
    except (LocalEntryNotFoundError, ValueError, OSError):
        return None
    path = Path(str(folder))
    return path if _loadable(path) or not loadable else None


def cached_models() -> list[dict[str, Any]]:
    """Every model snapshot in the hub cache (``scan_cache_dir``): ``{"name", "repo_id", "commit",
    "refs", "path", "loadable"}``; the name is ``repo_id`` for ``main``, ``repo_id@<ref>`` for another
    branch or tag, ``repo_id@<commit>`` for a snapshot no ref points at. ``[]`` without a cache."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(cache_dir())
    except (CacheNotFound, OSError):
        return []
    rows = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model":
            continue
        for rev in sorted(repo.revisions, key=lambda r: r.commit_hash):
            refs = sorted(rev.refs)
            names = [repo.repo_id if ref == "main" else f"{repo.repo_id}@{ref}" for ref in refs]
            for name in names or [f"{repo.repo_id}@{rev.commit_hash}"]:
                rows.append(
                    {
                        "name": name,
                        "repo_id": repo.repo_id,
                        "commit": rev.commit_hash,
                        "refs": refs,
                        "path": Path(rev.snapshot_path),
                        "loadable": _loadable(Path(rev.snapshot_path)),
                    }
                )
    return rows


# --------------------------------------------------------------------------- downloads


def files_to_fetch(name: HubName, files: list[str]) -> list[str]:
    """Which of a repository's ``files`` to download: ``config.json``, the tokenizer files and the
    safetensors weights (``model.safetensors``, or the index and its shards), top level only. A
    repository without them is refused, naming what it holds and what to do."""
    top = sorted(f for f in files if "/" not in f)
    if CONFIG not in top:
        raise HubError(
            f"model {str(name)!r}: the hub repository {name.repo_id} has no config.json at the top "
            f"(it holds: {_listing(files)}); it is not a transformers model folder"
        )
    if WEIGHTS in top:
        weights = [WEIGHTS]
    elif WEIGHTS_INDEX in top:
        weights = [WEIGHTS_INDEX, *(f for f in top if f.endswith(".safetensors"))]
    else:
        raise HubError(
            f"model {str(name)!r}: the hub repository {name.repo_id} has no safetensors weights "
            f"(it holds: {_listing(files)}); only safetensors are loaded, never pickled weights: download "
            "the .bin yourself and convert it with bertology.models.convert_to_safetensors into a folder "
            "with the config and tokenizer, or name a revision that has model.safetensors (NAME@REV)"
        )
    return [CONFIG, *(f for f in TOKENIZER_FILES if f in top), *weights]


def _listing(files: list[str], most: int = 12) -> str:
    shown = sorted(files)[:most]
    more = f", ... ({len(files) - most} more)" if len(files) > most else ""
    return (", ".join(shown) or "nothing") + more


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)


def _hub_failure(name: HubName, exc: BaseException, unknown: str) -> ModelError:
    """One line for a failed hub request. ``unknown``: the start of the "unknown model" line
    (the places already looked at), used when the hub has no such repository."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = endpoint()
    if isinstance(exc, GatedRepoError) or (
        isinstance(exc, HfHubHTTPError)
        and not isinstance(exc, RepositoryNotFoundError)
        and getattr(exc.response, "status_code", None) in (401, 403)
    ):
        return HubError(
            f"model {str(name)!r}: the hub repository {name.repo_id} is gated or private: accept its "
            f"terms at {where}/{name.repo_id} and log in (`hf auth login`, or set HF_TOKEN)"
        )
    if isinstance(exc, RevisionNotFoundError):
        return HubError(
            f"model {str(name)!r}: the hub repository {name.repo_id} has no revision {name.ref!r} "
            "(name a branch, tag or commit it has: NAME@REV)"
        )
    if isinstance(exc, RepositoryNotFoundError):
        return ModelError(
            f"{unknown}, and {where} has no repository {name.repo_id!r} "
            "(a private one needs a login: `hf auth login`, or set HF_TOKEN)"
        )
    if isinstance(exc, OfflineModeIsEnabled):
        return HubError(
            f"model {str(name)!r}: not in the Hugging Face cache ({cache_dir()}) and huggingface_hub is "
            "offline (HF_HUB_OFFLINE was set when it was imported); fetch it where there is a network: "
            f"`bertology models pull {name}`"
        )
    return HubError(
        f"model {str(name)!r}: not in the Hugging Face cache ({cache_dir()}) and the hub at {where} "
        f"could not be reached ({_first_line(exc)}); fetch it where there is a network "
        f"(`bertology models pull {name}`, then copy the cache), or set HF_HUB_OFFLINE=1 to use the cache only"
    )


def fetch(name: HubName, *, unknown: str | None = None) -> Path:
    """Download ``name``'s config, tokenizer files and safetensors weights into the hub cache
    (``snapshot_download(allow_patterns=...)``, which also moves ``refs/<branch>``) and return the
    snapshot folder. Asks the hub which files the revision holds first: one without safetensors is
    refused before anything is downloaded. ``unknown``: the "unknown model ..." start of the line
    for a repository the hub does not have."""
    from huggingface_hub import HfApi, snapshot_download

    unknown = unknown or f"unknown model {str(name)!r}"
    api = HfApi(endpoint=endpoint())
    try:
        info = api.model_info(name.repo_id, revision=name.revision)
        files = [s.rfilename for s in (info.siblings or [])]
    except Exception as exc:  # every failure of the request becomes one line
        raise _hub_failure(name, exc, unknown) from None
    wanted = files_to_fetch(name, files)
    try:
        folder = snapshot_download(
            name.repo_id,
            revision=name.ref,
            cache_dir=cache_dir(),
            endpoint=endpoint(),
            allow_patterns=wanted,
        )
    except Exception as exc:
        raise _hub_failure(name, exc, unknown) from None
    path = Path(str(folder))
    if not _loadable(path):
        raise HubError(
            f"model {str(name)!r}: the download into {path} is incomplete; run `bertology models pull {name}`"
        )
    return path


def offline_error(name: HubName, unknown: str) -> ModelError:
    """The line for a hub name that is not cached while offline: what was looked at and how to pull it.
    A :class:`HubError` for ``org/name`` (clearly meant for the hub), a plain :class:`ModelError`
    for a bare name (it may be a mistyped registry name)."""
    snapshot = cached(name, loadable=False)
    if snapshot is not None:  # cached, but not what the workbench loads (e.g. pickled weights only)
        held = sorted(p.name for p in snapshot.iterdir())
        return HubError(
            f"model {str(name)!r}: the Hugging Face cache's snapshot {snapshot} holds no config.json with "
            f"safetensors weights (it holds: {_listing(held)}), and offline (HF_HUB_OFFLINE or --offline) "
            f"so the hub was not asked: `bertology models pull {name}` where there is a network fetches them, "
            "or convert pickled weights with bertology.models.convert_to_safetensors"
        )
    cls = HubError if "/" in name.repo_id else ModelError
    return cls(
        f"{unknown}, nor in the Hugging Face cache ({cache_dir()}), and offline (HF_HUB_OFFLINE or "
        f"--offline) so the hub was not asked: fetch it ahead where there is a network with "
        f"`bertology models pull {name}` (then copy the cache, or point HF_HUB_CACHE at it)"
    )
