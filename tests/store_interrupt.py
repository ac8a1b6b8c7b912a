"""Stopping an extraction between two shard writes, as a kill would (shared by the store tests)."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from bertology.store import compute as store_compute


class Interrupted(Exception):
    """Stands in for a kill between two shard writes."""


@contextmanager
def interrupted_after(n_shards: int):
    """``extract`` inside the block writes ``n_shards`` shards and is then stopped as a kill would
    stop it, without a manifest: the next shard write raises :class:`Interrupted` (which the
    block expects)."""
    real_write = store_compute.write_shard
    written = []

    def write_or_stop(path, tensors, **options):
        if len(written) == n_shards:
            raise Interrupted(path.name)
        real_write(path, tensors, **options)
        written.append(path.name)

    with pytest.MonkeyPatch.context() as patch, pytest.raises(Interrupted):
        patch.setattr(store_compute, "write_shard", write_or_stop)
        yield
