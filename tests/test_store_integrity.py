"""Feature-store integrity: the key covers the tokenizer, per-shard checksums catch altered bytes,
damaged stores are repaired by extract, the manifest refuses edits, one writer at a time (a lock
released on crash), temporaries of killed writes are cleaned up, a full disk leaves nothing
half-written and says so."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
from store_interrupt import interrupted_after

from bertology import atomic
from bertology.corpus import Corpus, Sentence
from bertology.errors import StoreError
from bertology.fingerprints import tokenizer_fingerprint
from bertology.models import load_model
from bertology.store import FeatureStore, extract, verify_store
from bertology.store import write as store_write
from bertology.testing import save_tiny_model_dir, tiny_tokenizer


def _shards(store_dir):
    return sorted(store_dir.glob("shard-*.safetensors"))


def _same_files(a, b):
    names = sorted(p.name for p in a.glob("shard-*"))
    assert names == sorted(p.name for p in b.glob("shard-*")) and names
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.fixture
def ref_store(tiny_lm, small_corpus, tmp_path):
    """An uninterrupted store of the tiny model over 40 sentences in 5 shards."""
    return extract(tiny_lm, small_corpus, root=tmp_path / "ref", shard_size=8, progress=False)


def _copy_store(store, dest):
    dest.mkdir(parents=True)
    for f in store.path.iterdir():
        if f.is_file():
            (dest / f.name).write_bytes(f.read_bytes())
    return dest


# --------------------------------------------------------------------------- the key covers the tokenizer


def test_a_different_tokenizer_beside_the_same_weights_gets_its_own_store(tmp_path):
    """The issue's case: one folder, same weights and config.json, the tokenizer swapped for a cased
    one. The model fingerprint (weights + config) is unchanged, the store is not."""
    import transformers

    model_dir = save_tiny_model_dir("bert", tmp_path / "model")
    corpus = Corpus("c", [Sentence("s1", ["The", "Cat", "sat"]), Sentence("s2", ["a", "Dog"])])
    uncased = load_model(model_dir)
    first = extract(uncased, corpus, root=tmp_path / "stores", progress=False)
    cased_tok = transformers.BertTokenizer(vocab=dict(tiny_tokenizer("bert").get_vocab()), do_lower_case=False)
    cased_tok.save_pretrained(model_dir)
    cased = load_model(model_dir)
    assert cased.fingerprint == uncased.fingerprint  # weights + config.json: the same
    assert cased.tokenizer("Cat")["input_ids"] != uncased.tokenizer("Cat")["input_ids"]
    second = extract(cased, corpus, root=tmp_path / "stores", progress=False)
    assert second.path != first.path
    assert second.manifest["model"]["tokenizer_fingerprint"] != first.manifest["model"]["tokenizer_fingerprint"]
    assert not np.allclose(second.hidden(0), first.hidden(0))  # "Cat" is split differently when cased


def test_tokenizer_fingerprint_is_stable_and_ignores_the_last_calls_padding(minilm_tokenizer):
    from transformers import AutoTokenizer

    from bertology.models import embedded_models

    again = AutoTokenizer.from_pretrained(embedded_models()["minilm-l6"]["path"])
    before = tokenizer_fingerprint(again)
    assert before == tokenizer_fingerprint(minilm_tokenizer)
    again(["a b c"] * 2, truncation=True, max_length=3, padding="max_length")  # sets backend state
    assert tokenizer_fingerprint(again) == before
    cased = AutoTokenizer.from_pretrained(embedded_models()["minilm-l6"]["path"], do_lower_case=False)
    assert tokenizer_fingerprint(cased) != before


# --------------------------------------------------------------------------- checksums and repair


def test_shards_carry_checksums_in_sha256sum_format(ref_store):
    import hashlib

    for shard in _shards(ref_store.path):
        digest, name = (shard.parent / (shard.name + ".sha256")).read_text().split()
        assert name == shard.name and digest == hashlib.sha256(shard.read_bytes()).hexdigest()
        assert ref_store.manifest["shard_sha256"][shard.name] == digest
        assert ref_store.manifest["shard_bytes"][shard.name] == shard.stat().st_size
    assert verify_store(ref_store.path) == []


def test_shards_are_written_byte_for_byte_as_safetensors_writes_them(tmp_path):
    """The store's own writer (one write per tensor, hashed on the way) gives safetensors' bytes."""
    import hashlib

    import torch
    from safetensors.torch import load_file, save

    from bertology.store import save_safetensors

    g = torch.Generator().manual_seed(0)
    tensors = {
        "sentence_ids": torch.arange(5),
        "word_counts": torch.tensor([3, 4, 5, 6, 7]),
        "hidden": torch.randn(3, 25, 8, generator=g),
        "attention": torch.randn(2, 4, 135, generator=g).half(),
        "special": torch.randn(2, 25, 4, 2, generator=g).bfloat16().transpose(1, 2),  # not contiguous
        "token_offsets": torch.randint(0, 9, (5, 2, 4, 2, 18), generator=g, dtype=torch.int32),
        "empty": torch.zeros(0, 3),
    }
    digest = save_safetensors(tensors, tmp_path / "ours.safetensors")
    data = (tmp_path / "ours.safetensors").read_bytes()
    assert (
        data == save({name: t.contiguous() for name, t in tensors.items()})
        and digest == hashlib.sha256(data).hexdigest()
    )
    for name, t in load_file(tmp_path / "ours.safetensors").items():
        assert torch.equal(t, tensors[name]), name
    with pytest.raises(StoreError, match="'flags'.*cannot be written"):
        save_safetensors({"flags": torch.zeros(2, dtype=torch.bool)}, tmp_path / "bad.safetensors")


def _flip_a_float(shard):
    """Change one byte near the end of the shard (inside the last tensor's data), same size."""
    data = bytearray(shard.read_bytes())
    data[-5] ^= 0x40
    shard.write_bytes(bytes(data))


def test_a_flipped_float_is_detected_on_read_and_repaired_by_extract(tiny_lm, small_corpus, ref_store, tmp_path):
    store_dir = _copy_store(ref_store, tmp_path / "copy" / ref_store.path.name)
    victim = _shards(store_dir)[2]
    _flip_a_float(victim)
    assert verify_store(store_dir) == [(victim.name, "contents altered (sha256 differs from the manifest's)")]
    store = FeatureStore(store_dir)  # sizes are fine: opening is cheap and succeeds
    k = store.manifest["shards"].index(victim.name)
    sentence = store.manifest["plan"][k][0]
    with pytest.raises(StoreError, match=rf"{victim.name}: contents altered.*recomputes exactly the damaged"):
        store.hidden(sentence)  # the first read of that shard hashes it
    untouched = {p.name: p.stat().st_mtime_ns for p in _shards(store_dir) if p != victim}
    repaired = extract(tiny_lm, small_corpus, root=tmp_path / "copy", shard_size=8, progress=False)
    assert repaired.path == store_dir
    _same_files(ref_store.path, store_dir)
    assert {p.name: p.stat().st_mtime_ns for p in _shards(store_dir) if p != victim} == untouched  # only one redone
    np.testing.assert_array_equal(repaired.hidden(sentence), ref_store.hidden(sentence))
    assert not (store_dir / ".damaged").exists()


def test_full_verification_catches_what_lazy_opening_does_not(tiny_lm, small_corpus, ref_store, tmp_path):
    store_dir = _copy_store(ref_store, tmp_path / "copy" / ref_store.path.name)
    _flip_a_float(_shards(store_dir)[0])
    with pytest.raises(StoreError, match="contents altered"):
        FeatureStore(store_dir, verify="full")
    assert FeatureStore(store_dir, verify="size").n_sentences == 40  # sizes only: never hashes
    # extract with verify=True hashes every shard and repairs without any reader having looked first
    extract(tiny_lm, small_corpus, root=tmp_path / "copy", shard_size=8, progress=False, verify=True)
    _same_files(ref_store.path, store_dir)


@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_a_truncated_or_deleted_shard_is_found_at_open_and_recomputed(
    tiny_lm, small_corpus, ref_store, tmp_path, damage
):
    store_dir = _copy_store(ref_store, tmp_path / "copy" / ref_store.path.name)
    victim = _shards(store_dir)[1]
    if damage == "truncate":
        victim.write_bytes(victim.read_bytes()[:1000])
        problem = "1000 bytes instead of"
    else:
        victim.unlink()
        problem = "missing"
    with pytest.raises(StoreError, match=rf"damaged feature store -- {victim.name}: {problem}"):
        FeatureStore(store_dir)
    untouched = {p.name: p.stat().st_mtime_ns for p in _shards(store_dir) if p != victim}
    extract(tiny_lm, small_corpus, root=tmp_path / "copy", shard_size=8, progress=False)
    _same_files(ref_store.path, store_dir)
    assert {p.name: p.stat().st_mtime_ns for p in _shards(store_dir) if p != victim} == untouched


def test_resume_recomputes_an_altered_finished_shard(tiny_lm, small_corpus, ref_store, tmp_path):
    """Before the manifest exists, each shard's .sha256 file is what resume checks."""
    with interrupted_after(3):
        extract(tiny_lm, small_corpus, root=tmp_path / "b", shard_size=8, progress=False)
    store_dir = next((tmp_path / "b").iterdir())
    _flip_a_float(_shards(store_dir)[1])
    extract(tiny_lm, small_corpus, root=tmp_path / "b", shard_size=8, progress=False)
    _same_files(ref_store.path, store_dir)


def test_force_recomputes_every_shard(tiny_lm, small_corpus, ref_store, tmp_path):
    for shard in _shards(ref_store.path):
        os.utime(shard, ns=(10**18, 10**18))  # stamp 2001: a rewritten file gets the current time
    again = extract(tiny_lm, small_corpus, root=tmp_path / "ref", shard_size=8, progress=False, force=True)
    assert len(_shards(again.path)) == 5
    assert all(p.stat().st_mtime_ns > 10**18 for p in _shards(again.path))  # every shard rewritten
    assert verify_store(again.path) == []


# --------------------------------------------------------------------------- the manifest


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: {}, r"field 'version' is missing"),
        (lambda m: [], r"expected a JSON object, found list"),
        (
            lambda m: {**m, "word_counts": [m["word_counts"][0] + 1] + m["word_counts"][1:]},
            r"edited or damaged \(its content no longer matches its checksum",
        ),
        (lambda m: {**m, "word_counts": m["word_counts"][:-1]}, r"field 'word_counts' must list one"),
        (lambda m: {**m, "n_layers": "3"}, r"field 'n_layers' must be a positive integer"),
        (lambda m: {**m, "shards": ["../../etc/passwd"] + m["shards"][1:]}, r"field 'shards' must list file names"),
    ],
)
def test_a_damaged_or_edited_manifest_is_refused_by_field_and_rebuilt_by_extract(
    tiny_lm, small_corpus, ref_store, tmp_path, edit, message
):
    store_dir = _copy_store(ref_store, tmp_path / "copy" / ref_store.path.name)
    manifest = json.loads((store_dir / "manifest.json").read_text())
    (store_dir / "manifest.json").write_text(json.dumps(edit(manifest)))
    with pytest.raises(StoreError, match=rf"manifest.json: .*{message}"):
        FeatureStore(store_dir)
    mtimes = {p.name: p.stat().st_mtime_ns for p in _shards(store_dir)}
    rebuilt = extract(tiny_lm, small_corpus, root=tmp_path / "copy", shard_size=8, progress=False)
    assert {p.name: p.stat().st_mtime_ns for p in _shards(store_dir)} == mtimes  # verified, not recomputed
    assert rebuilt.manifest["word_counts"] == ref_store.manifest["word_counts"]
    skip = {"extract_seconds_last_run", "manifest_sha256"}
    assert {k: v for k, v in rebuilt.manifest.items() if k not in skip} == {
        k: v for k, v in ref_store.manifest.items() if k not in skip
    }


# --------------------------------------------------------------------------- one writer at a time


def test_a_second_extraction_does_not_touch_the_first_ones_temporary_file(tiny_lm, small_corpus, tmp_path):
    """While one extraction holds the store, another neither deletes its in-flight temporary nor
    writes: it waits, or (wait=False) says who holds the lock."""
    with interrupted_after(1):
        extract(tiny_lm, small_corpus, root=tmp_path, shard_size=8, progress=False)
    store_dir = next(tmp_path.iterdir())
    in_flight = store_dir / ".shard-00004.safetensors.k2j4x9_a.tmp"
    with atomic.folder_lock(store_dir):
        in_flight.write_bytes(b"being written by the first extraction")
        with pytest.raises(StoreError, match=rf"locked by pid {os.getpid()}.*released when it exits"):
            extract(tiny_lm, small_corpus, root=tmp_path, shard_size=8, progress=False, wait=False)
        assert in_flight.read_bytes() == b"being written by the first extraction"
        assert len(_shards(store_dir)) == 1
    store = extract(tiny_lm, small_corpus, root=tmp_path, shard_size=8, progress=False)
    assert not in_flight.exists() and len(_shards(store.path)) == 5  # a killed writer's leftover: removed


def test_folder_lock_waits_for_the_holder():
    """``wait=True`` blocks until the holder lets go (here the holder is told to release when the
    waiter reports that it waits: no timing involved)."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        release, held = threading.Event(), threading.Event()

        def holder():
            with atomic.folder_lock(folder):
                held.set()
                release.wait(60)

        t = threading.Thread(target=holder)
        t.start()
        held.wait(60)
        messages: list[str] = []

        def on_wait(message: str) -> None:
            messages.append(message)
            release.set()

        with atomic.folder_lock(folder, wait=True, poll_seconds=0.01, on_wait=on_wait):
            pass
        t.join()
        assert len(messages) == 1 and "waiting for it to finish" in messages[0]


def test_the_lock_of_a_killed_process_is_released(tmp_path):
    script = (
        "import sys, time\nfrom bertology import atomic\n"
        "with atomic.folder_lock(sys.argv[1]):\n    print('locked', flush=True)\n    time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(atomic.LockHeld, match=f"pid {proc.pid}"):
            with atomic.folder_lock(tmp_path, wait=False):
                pass
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with atomic.folder_lock(tmp_path, wait=False):  # released by the operating system
        pass


def test_stale_temporaries_of_killed_writes_are_removed(tmp_path):
    """Files from atomic_path and folders from checkpoints.atomic_dir; nothing else."""
    from bertology.checkpoints import atomic_dir

    (tmp_path / ".shard-00001.safetensors.ab12cd_3.tmp").write_bytes(b"x")
    half_checkpoint = tmp_path / ".checkpoint-50.q8w7e6r5.tmp"
    half_checkpoint.mkdir()
    (half_checkpoint / "model.safetensors").write_bytes(b"half")
    (tmp_path / ".checkpoint-40.zz99yy88.old").mkdir()
    keep = ["keep.tmp", ".lock", "notes.txt", ".hidden", "shard-00000.safetensors"]
    for name in keep:
        (tmp_path / name).write_text("keep")
    with pytest.raises(RuntimeError):
        with atomic_dir(tmp_path / "checkpoint-60") as tmp:  # the real helper's temporary name matches
            (tmp / "x").write_text("x")
            assert atomic.TEMPORARY_NAME.match(tmp.name)
            raise RuntimeError
    removed = atomic.remove_stale_temporaries(tmp_path)
    assert sorted(p.name for p in removed) == [
        ".checkpoint-40.zz99yy88.old",
        ".checkpoint-50.q8w7e6r5.tmp",
        ".shard-00001.safetensors.ab12cd_3.tmp",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keep)


def test_an_atomic_write_onto_a_folder_is_refused_before_anything_is_written(tmp_path):
    """`bertology annotate x.txt --output SOME_FOLDER`: a clear error, no temporary in the folder's parent."""
    from bertology.errors import ConfigError

    target = tmp_path / "results"
    target.mkdir()
    (target / "kept.txt").write_text("kept")
    with pytest.raises(ConfigError, match="results is a folder: give the path of a file"):
        atomic.write_text(target, "text")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]
    assert (target / "kept.txt").read_text() == "kept"


# --------------------------------------------------------------------------- a full disk


def test_disk_full_leaves_nothing_half_written_and_resume_completes(
    tiny_lm, small_corpus, ref_store, tmp_path, monkeypatch
):
    real_save = store_write.save_safetensors
    written = []

    def save_until_full(tensors, filename, *args, **kwargs):
        if len(written) == 2:  # the third shard: half of it reaches the disk, then the disk is full
            with open(filename, "wb") as fh:
                fh.write(b"\0" * 4096)
            raise OSError(errno.ENOSPC, "No space left on device", filename)
        written.append(filename)
        return real_save(tensors, filename, *args, **kwargs)

    monkeypatch.setattr(store_write, "save_safetensors", save_until_full)
    with pytest.raises(
        StoreError,
        match=r"disk full while writing .*needs about \d+ MB more.*Nothing half-written"
        r".*run extract again to resume",
    ) as info:
        extract(tiny_lm, small_corpus, root=tmp_path / "full", shard_size=8, progress=False)
    assert "Traceback" not in str(info.value)
    store_dir = next((tmp_path / "full").iterdir())
    assert not [p.name for p in store_dir.iterdir() if p.name.endswith(".tmp")]
    assert not (store_dir / "manifest.json").exists()
    assert len(_shards(store_dir)) == 2
    for shard in _shards(store_dir):  # what is left is whole and checksummed
        assert (store_dir / (shard.name + ".sha256")).is_file()
    monkeypatch.setattr(store_write, "save_safetensors", real_save)
    extract(tiny_lm, small_corpus, root=tmp_path / "full", shard_size=8, progress=False)
    _same_files(ref_store.path, store_dir)


def test_disk_full_at_the_manifest_leaves_no_manifest(tiny_lm, small_corpus, tmp_path, monkeypatch):
    real = atomic.write_json

    def write_json(path, obj):
        if str(path).endswith("manifest.json"):
            with atomic.atomic_path(path) as tmp:
                tmp.write_text('{"half": ')
                raise OSError(errno.ENOSPC, "No space left on device", str(tmp))
        return real(path, obj)

    monkeypatch.setattr(atomic, "write_json", write_json)
    with pytest.raises(StoreError, match="disk full while writing"):
        extract(tiny_lm, small_corpus, root=tmp_path, shard_size=8, progress=False)
    store_dir = next(tmp_path.iterdir())
    assert not (store_dir / "manifest.json").exists()
    assert not [p for p in store_dir.iterdir() if p.name.endswith(".tmp")]


def test_cli_verify_reports_damage_with_exit_code_2(ref_store, tmp_path, monkeypatch, capsys):
    from bertology.cli import main

    store_dir = _copy_store(ref_store, tmp_path / "copy" / ref_store.path.name)
    monkeypatch.setattr(sys, "argv", ["bertology", "verify", str(store_dir)])
    main()  # a sound store: returns normally (exit code 0)
    assert "sound (manifest and every shard's sha256 checked)" in capsys.readouterr().out
    victim = _shards(store_dir)[3]
    _flip_a_float(victim)
    with pytest.raises(SystemExit) as damaged:
        main()
    err = capsys.readouterr().err
    assert damaged.value.code == 2 and f"{victim.name}: contents altered" in err and "Traceback" not in err
