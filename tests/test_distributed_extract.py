"""Sharded extraction under torchrun: 2 gloo processes on CPU write a store byte-identical to a
single process's, and a run whose rank 1 is killed resumes to the same bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bertology.distributed import assign_shards
from bertology.testing import save_tiny_model_dir

SKIP = {"extract_seconds_last_run", "extract_processes_last_run", "manifest_sha256"}

WORKER = """
import os, signal, sys
from bertology import distributed
from bertology.corpus import load_corpus
from bertology.models import load_model
from bertology.store import compute as store_compute, extract

model_dir, root, log_dir, kill_rank = sys.argv[1:5]
group, device = distributed.init_from_env("cpu")
real_write = store_compute.write_shard

def write_and_maybe_die(path, tensors, **options):
    real_write(path, tensors, **options)
    with open(os.path.join(log_dir, f"rank{group.rank}.log"), "a") as fh:
        fh.write(path.name + "\\n")
    if str(group.rank) == kill_rank:
        os.kill(os.getpid(), signal.SIGKILL)   # rank 1 dies right after its first shard

store_compute.write_shard = write_and_maybe_die
lm = load_model(model_dir, device=device)
extract(lm, load_corpus("brown-sample", limit=40), root=root, shard_size=8, progress=False)
distributed.shutdown()
"""


def _env(tmp_path):
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "BERTOLOGY_HOME": str(tmp_path / "home"),
        "TOKENIZERS_PARALLELISM": "false",
    }


def _torchrun(tmp_path, *args, nproc=2):
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc), *args],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _store(root):
    (store,) = [p for p in root.iterdir() if p.is_dir()]
    return store


def _assert_identical(a, b):
    names = sorted(p.name for p in a.glob("shard-*"))
    assert names == sorted(p.name for p in b.glob("shard-*")) and len(names) == 10  # 5 shards + checksums
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    ma, mb = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
    assert {k: v for k, v in ma.items() if k not in SKIP} == {k: v for k, v in mb.items() if k not in SKIP}


@pytest.fixture(scope="module")
def model_and_single_store(tmp_path_factory):
    """The tiny model folder and the store one plain process writes (same thread count as the ranks):
    ``bertology extract`` run in this process on one torch thread (the ranks' OMP_NUM_THREADS=1),
    which saves a fresh interpreter's imports; the ranks below are real processes."""
    import torch
    from cli_inprocess import run_cli

    tmp = tmp_path_factory.mktemp("dist")
    model_dir = save_tiny_model_dir("bert", tmp / "model")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        done = run_cli(
            "extract",
            "--model",
            str(model_dir),
            "--limit",
            "40",
            "--shard-size",
            "8",
            "--device",
            "cpu",
            "--root",
            str(tmp / "single"),
            env={"BERTOLOGY_HOME": str(tmp / "home")},
        )
    finally:
        torch.set_num_threads(threads)
    assert done.returncode == 0, done.stderr[-3000:]
    return model_dir, _store(tmp / "single")


@pytest.mark.slow  # two gloo processes
def test_two_gloo_processes_write_the_single_process_store(model_and_single_store, tmp_path):
    """The documented command: torchrun ... -m bertology.cli extract."""
    model_dir, single = model_and_single_store
    done = _torchrun(
        tmp_path,
        "-m",
        "bertology.cli",
        "extract",
        "--model",
        str(model_dir),
        "--limit",
        "40",
        "--shard-size",
        "8",
        "--device",
        "cpu",
        "--root",
        str(tmp_path / "dist"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    store = _store(tmp_path / "dist")
    assert store.name == single.name and done.stdout.count(str(store)) == 1  # rank 0 alone prints
    assert json.loads((store / "manifest.json").read_text())["extract_processes_last_run"] == 2
    _assert_identical(single, store)


@pytest.mark.slow  # gloo processes, killed and resumed
def test_a_killed_rank_resumes_to_the_same_bytes(model_and_single_store, tmp_path):
    model_dir, single = model_and_single_store
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    logs = tmp_path / "logs"
    logs.mkdir()
    root = tmp_path / "dist"
    killed = _torchrun(tmp_path, str(worker), str(model_dir), str(root), str(logs), "1")
    assert killed.returncode != 0
    store = _store(root)
    assert not (store / "manifest.json").exists()
    (first_of_rank1,) = (logs / "rank1.log").read_text().split()
    assert (store / first_of_rank1).is_file() and (store / f"{first_of_rank1}.sha256").is_file()
    kept = (store / first_of_rank1).stat().st_mtime_ns
    (logs / "rank0.log").unlink(missing_ok=True)
    (logs / "rank1.log").unlink()
    resumed = _torchrun(tmp_path, str(worker), str(model_dir), str(root), str(logs), "none")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    redone = [line for f in logs.glob("rank*.log") for line in f.read_text().split()]
    assert first_of_rank1 not in redone and (store / first_of_rank1).stat().st_mtime_ns == kept
    assert not [p for p in store.iterdir() if p.name.endswith(".tmp")]
    _assert_identical(single, store)


def test_shards_are_split_by_cost_deterministically():
    # costs 9, 7, 5, 3, 1 over 2 ranks: 9 -> r0, 7 -> r1, 5 -> r1 (7 < 9), 3 -> r0 (9 < 12),
    # 1 -> r0 (12 = 12: the lower rank)
    assert assign_shards([0, 1, 2, 3, 4], [9, 7, 5, 3, 1], 2) == [[0, 3, 4], [1, 2]]
    assert assign_shards([0, 1, 2], [1, 5, 2], 2) == [[1], [0, 2]]  # 5 -> r0; 2 -> r1; 1 -> r1 (2 < 5)
    assert assign_shards([4, 7], [1, 1], 3) == [[4], [7], []]
    assert assign_shards([2, 5], [3, 8], 1) == [[2, 5]]
