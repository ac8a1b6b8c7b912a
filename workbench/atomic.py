"""Atomic writes, folder locks and the clean-up of temporaries that killed writes leave behind.

A file is written to a temporary name beside it (``.<name>.<random>.tmp``) and renamed into place
with ``os.replace``, so a reader sees the old file or the whole new one, never half of it. A killed
process can leave such a temporary behind (and :func:`bertology.checkpoints.atomic_dir` a
``.<name>.<random>.tmp`` / ``.old`` folder): :func:`remove_stale_temporaries` deletes them, and
must run under :func:`folder_lock` so it never deletes the temporary of a writer that is still
alive.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bertology.errors import ConfigError, WorkbenchError

# what atomic_path (tempfile.mkstemp) and checkpoints.atomic_dir (tempfile.mkdtemp) name their temporaries
TEMPORARY_NAME = re.compile(r"^\..+\.[A-Za-z0-9_]+\.(tmp|old)$")
LOCK_NAME = ".lock"


class LockHeld(WorkbenchError):
    """Another process holds the folder's lock (and the caller chose not to wait)."""


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is renamed onto ``path``.

    On error (a full disk included) the temporary file is removed and ``path`` is left untouched;
    an operating-system error that names no file (a write's ``ENOSPC``) is raised naming ``path``.
    ``path`` naming an existing folder is a ``ConfigError`` before anything is written (else the
    temporary would be made in the folder's parent, outside what the user named).
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path} is a folder: give the path of a file to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, path)
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:  # a write's error (a full disk) names no file
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def is_disk_full(exc: BaseException) -> bool:
    """True for the errors of a full disk or an exhausted quota."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Delete the temporaries of killed atomic writes directly inside ``folder``: files and folders
    named ``.<name>.<random>.tmp`` (:func:`atomic_path`, ``checkpoints.atomic_dir``) and
    ``.<name>.<random>.old`` (the swap folder of ``atomic_dir``). Returns what was removed.

    Call it only while holding :func:`folder_lock` on ``folder`` (or when no writer can be running),
    else a live writer's temporary is deleted under it.
    """
    folder = Path(folder)
    removed: list[Path] = []
    if not folder.is_dir():
        return removed
    for entry in folder.iterdir():
        if not TEMPORARY_NAME.match(entry.name):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def _lock_holder(lock_file: Path) -> str:
    try:
        pid = lock_file.read_text().strip()
    except OSError:
        pid = ""
    return f"pid {pid}" if pid else "another process"


@contextmanager
def folder_lock(
    folder: str | os.PathLike,
    *,
    wait: bool = True,
    poll_seconds: float = 0.5,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[Path]:
    """Hold an exclusive lock on ``folder`` (an ``fcntl.flock`` on ``folder/.lock``) for the block.

    The operating system releases the lock when the holder exits, however it exits (a crash or
    SIGKILL included), so a stale lock never blocks the next run. When another process holds it:
    ``wait=True`` polls every ``poll_seconds`` (calling ``on_wait(message)`` once, naming the
    holder's pid), ``wait=False`` raises :class:`LockHeld` naming it.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lock_file = folder / LOCK_NAME
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                message = f"{folder} is locked by {_lock_holder(lock_file)} (another extraction or run is writing it)"
                if not wait:
                    raise LockHeld(
                        f"{message}; wait for it to finish, or stop it -- its lock is released when it exits"
                    ) from None
                if not told and on_wait is not None:
                    on_wait(f"{message}; waiting for it to finish")
                told = True
                time.sleep(poll_seconds)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        try:
            yield lock_file
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def locked_output_folder(
    folder: str | os.PathLike, *, wait: bool = True, on_wait: Callable[[str], None] | None = None
) -> Iterator[Path]:
    """:func:`folder_lock` on an output folder (a training run, a built corpus) for the block, with
    the temporaries of killed writes directly inside it removed first (under the lock). The folders
    this call made (``folder`` and missing parents) are removed again when the block fails before
    anything but the lock was written in them, so a refused start leaves nothing behind."""
    folder = Path(folder)
    made = [p for p in (folder, *folder.parents) if not p.exists() and not p.is_symlink()]
    try:
        with folder_lock(folder, wait=wait, on_wait=on_wait) as lock_file:
            remove_stale_temporaries(folder)
            yield lock_file
    except BaseException:
        if made and made[0] == folder and folder.is_dir() and all(p.name == LOCK_NAME for p in folder.iterdir()):
            shutil.rmtree(folder, ignore_errors=True)
            for parent in made[1:]:
                try:
                    parent.rmdir()  # only while empty
                except OSError:
                    break
        raise
