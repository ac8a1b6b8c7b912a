"""Hugging Face hub names (bertology.hub through bertology.models.resolve / load_model), without
the internet: a hub cache built here in the hub's own layout (refs/, snapshots/<commit>/ linking
into blobs/), and a local HTTP stand-in for the hub (HF_ENDPOINT) that answers what huggingface_hub
asks: the revision's info, its file tree, HEAD and GET of each file, and the hub's error codes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from bertology.errors import ModelError
from bertology.testing import save_tiny_model_dir
from tests.cli_inprocess import run_cli

COMMIT_A = "a" * 40
COMMIT_B = "b" * 40


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory) -> dict[str, Path]:
    """Two tiny random BERT folders (safetensors + fast tokenizer): the weights of two commits."""
    root = tmp_path_factory.mktemp("tiny_hub_models")
    return {
        commit: save_tiny_model_dir("bert", root / commit, seed=seed)
        for seed, commit in enumerate((COMMIT_A, COMMIT_B))
    }


def folder_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def build_cache(cache: Path, repo_id: str, commits: dict[str, dict[str, bytes]], refs: dict[str, str]) -> Path:
    """A hub cache repository as huggingface_hub writes it: ``models--org--name/`` with
    ``blobs/<sha256>``, ``snapshots/<commit>/<file>`` (relative links to the blobs) and
    ``refs/<branch>`` holding the commit."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    for commit, files in commits.items():
        snapshot = repo / "snapshots" / commit
        snapshot.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            blob = hashlib.sha256(data).hexdigest()
            (repo / "blobs" / blob).write_bytes(data)
            (snapshot / name).symlink_to(Path("..", "..", "blobs", blob))
    for ref, commit in refs.items():
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    return repo


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


# --------------------------------------------------------------------------- (a) the cache


def test_a_cached_hub_model_loads_by_name_branch_and_commit(hub_cache, tiny_dirs):
    from bertology import hub
    from bertology.models import list_models, load_model
    from bertology.store.settings import ExtractionSettings, store_key

    files = {c: folder_files(d) for c, d in tiny_dirs.items()}
    build_cache(hub_cache, "planted-org/tiny-bert", files, {"main": COMMIT_A, "v2": COMMIT_B})

    by_name = load_model("planted-org/tiny-bert")  # offline (conftest): the cache alone
    assert by_name.revision == COMMIT_A and by_name.name == "planted-org/tiny-bert"
    assert by_name.path == hub_cache / "models--planted-org--tiny-bert" / "snapshots" / COMMIT_A
    assert COMMIT_A[:12] in repr(by_name) and by_name.record()["revision"] == COMMIT_A
    at_main = load_model("planted-org/tiny-bert@main")
    assert at_main.revision == COMMIT_A and at_main.fingerprint == by_name.fingerprint
    at_tag = load_model("planted-org/tiny-bert@v2")
    at_commit = load_model(f"planted-org/tiny-bert@{COMMIT_B}")
    assert at_tag.revision == at_commit.revision == COMMIT_B
    # the weights differ (two seeds): so do the fingerprints and the store keys
    settings = ExtractionSettings()
    assert at_commit.fingerprint != by_name.fingerprint
    assert store_key(at_commit, "corpus", settings) != store_key(by_name, "corpus", settings)

    names = dict(zip(list_models()["name"], list_models()["kind"]))
    assert names["planted-org/tiny-bert"] == "hub cache" and names["planted-org/tiny-bert@v2"] == "hub cache"
    assert hub.snapshot_commit(by_name.path) == COMMIT_A


def test_the_same_weights_at_another_commit_get_another_fingerprint(hub_cache, tiny_dirs):
    """A branch moved to a commit with the same files still makes a new store: the commit is part of
    the fingerprint, not only the bytes."""
    from bertology.models import load_model
    from bertology.store.settings import ExtractionSettings, store_key

    same = folder_files(tiny_dirs[COMMIT_A])
    build_cache(hub_cache, "org/same", {COMMIT_A: same, COMMIT_B: same}, {"main": COMMIT_A})
    first, moved = load_model("org/same"), load_model(f"org/same@{COMMIT_B}")
    assert first.revision == COMMIT_A and moved.revision == COMMIT_B
    assert first.fingerprint != moved.fingerprint
    settings = ExtractionSettings()
    assert store_key(first, "c", settings) != store_key(moved, "c", settings)


def test_registry_names_and_folders_come_before_the_hub(hub_cache, tiny_dirs, tmp_path, monkeypatch):
    """A folder that looks like ``org/name`` is that folder; a registry name is the registry's."""
    from bertology.models import resolve

    build_cache(hub_cache, "org/name", {COMMIT_A: folder_files(tiny_dirs[COMMIT_A])}, {"main": COMMIT_A})
    build_cache(hub_cache, "minilm-l6", {COMMIT_A: folder_files(tiny_dirs[COMMIT_A])}, {"main": COMMIT_A})
    monkeypatch.chdir(tmp_path)
    shutil.copytree(tiny_dirs[COMMIT_B], tmp_path / "org" / "name")
    assert resolve("org/name")[1] == Path("org/name")
    assert "snapshots" not in str(resolve("minilm-l6")[1])


def test_hub_model_digest_and_config_validation(hub_cache, tiny_dirs):
    """A study config naming a cached hub model: the field is valid and the run's input digest
    carries the commit."""
    from bertology.fingerprints import input_digest
    from bertology.validation import check_values

    build_cache(hub_cache, "org/tiny", {COMMIT_A: folder_files(tiny_dirs[COMMIT_A])}, {"main": COMMIT_A})
    check_values({"model": "org/tiny"}, "edge_probing: test")
    digest = input_digest("org/tiny")
    assert digest is not None and digest["kind"] == "model" and digest["revision"] == COMMIT_A


def test_offline_with_nothing_cached_says_so_and_how_to_pull(hub_cache):
    from bertology.models import load_model

    with pytest.raises(ModelError) as err:
        load_model("org/absent")
    message = str(err.value)
    assert "\n" not in message and "offline" in message and "bertology models pull org/absent" in message
    assert str(hub_cache) in message and "not a registry name" in message
    proc = run_cli("--offline", "probe", "--model", "org/absent", env={"HF_HUB_OFFLINE": "0"})
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error:") and "offline" in line and "bertology models pull org/absent" in line


def test_a_name_that_is_nothing_names_the_places_looked_at():
    from bertology.models import resolve

    with pytest.raises(ModelError, match=r"unknown model '\./nope/x@1'.*not a directory.*nor a Hugging Face hub name"):
        resolve("./nope/x@1")


# --------------------------------------------------------------------------- (b) a stand-in for the hub


class FakeHub:
    """``repos``: {repo_id: {"refs": {name: commit}, "commits": {commit: {file: bytes}}}} or
    {repo_id: {"status": code, "error": X-Error-Code}}; every request path is kept in ``requested``."""

    def __init__(self, repos: dict):
        self.repos = repos
        self.requested: list[tuple[str, str]] = []

    def lookup(self, repo_id: str, rev: str) -> tuple[str, dict[str, bytes]] | tuple[int, str]:
        repo = self.repos.get(repo_id)
        if repo is None:
            return 404, "RepoNotFound"
        if "status" in repo:
            return repo["status"], repo["error"]
        commit = repo["refs"].get(rev, rev)
        if commit not in repo["commits"]:
            return 404, "RevisionNotFound"
        return commit, repo["commits"][commit]

    def handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def error(self, code: int, error_code: str) -> None:
                body = json.dumps({"error": error_code}).encode()
                self.send_response(code)
                self.send_header("X-Error-Code", error_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def json(self, data) -> None:
                body = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def route(self) -> None:
                path = unquote(urlsplit(self.path).path)
                hub.requested.append((self.command, path))
                parts = path.strip("/").split("/")
                if parts[:2] == ["api", "models"]:
                    rest = parts[2:]
                    for i, word in enumerate(rest):
                        if word in ("revision", "tree"):
                            repo_id, kind, rev = "/".join(rest[:i]), word, "/".join(rest[i + 1 :])
                            break
                    else:
                        repo_id, kind, rev = "/".join(rest), "revision", "main"
                    found = hub.lookup(repo_id, rev)
                    if isinstance(found[0], int):
                        return self.error(*found)
                    commit, files = found
                    if kind == "tree":
                        return self.json(
                            [
                                {"type": "file", "path": n, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                                for n, b in sorted(files.items())
                            ]
                        )
                    return self.json(
                        {
                            "id": repo_id,
                            "modelId": repo_id,
                            "sha": commit,
                            "siblings": [{"rfilename": n} for n in sorted(files)],
                        }
                    )
                if "resolve" in parts:
                    i = parts.index("resolve")
                    repo_id, rev, name = "/".join(parts[:i]), parts[i + 1], "/".join(parts[i + 2 :])
                    found = hub.lookup(repo_id, rev)
                    if isinstance(found[0], int):
                        return self.error(*found)
                    commit, files = found
                    if name not in files:
                        return self.error(404, "EntryNotFound")
                    data = files[name]
                    self.send_response(200)
                    self.send_header("X-Repo-Commit", commit)
                    self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                    self.send_header("Content-Length", str(len(data)))
                    self.send_header("Content-Type", "application/octet-stream")
                    self.end_headers()
                    if self.command == "GET":
                        self.wfile.write(data)
                    return None
                return self.error(404, "RepoNotFound")

            do_GET = route
            do_HEAD = route

        return Handler


@pytest.fixture
def fake_hub(hub_cache, tiny_dirs, monkeypatch):
    """A hub on 127.0.0.1 (HF_ENDPOINT) with a safetensors repo that also holds a pickled
    ``pytorch_model.bin``, a pickle-only repo and a gated one; online (HF_HUB_OFFLINE=0)."""
    from huggingface_hub import constants

    files_a = folder_files(tiny_dirs[COMMIT_A])
    files_b = folder_files(tiny_dirs[COMMIT_B])
    pickled = {"pytorch_model.bin": b"PICKLE-MUST-NOT-BE-FETCHED", "flax_model.msgpack": b"no"}
    hub = FakeHub(
        {
            "planted-org/tiny-bert": {
                "refs": {"main": COMMIT_A, "v2": COMMIT_B},
                "commits": {COMMIT_A: {**files_a, **pickled}, COMMIT_B: files_b},
            },
            "legacy-tiny": {"refs": {"main": COMMIT_B}, "commits": {COMMIT_B: files_b}},
            "planted-org/pickle-only": {
                "refs": {"main": COMMIT_A},
                "commits": {
                    COMMIT_A: {
                        "config.json": files_a["config.json"],
                        "tokenizer.json": files_a["tokenizer.json"],
                        **pickled,
                    }
                },
            },
            "planted-org/gated": {"status": 401, "error": "GatedRepo"},
        }
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), hub.handler())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # read by huggingface_hub at its import
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_PROGRESS_BARS", True)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield hub
    server.shutdown()
    server.server_close()


def test_a_download_end_to_end_fetches_safetensors_never_pickles(fake_hub, hub_cache):
    from bertology.models import load_model

    lm = load_model("planted-org/tiny-bert")
    assert lm.revision == COMMIT_A
    snapshot = hub_cache / "models--planted-org--tiny-bert" / "snapshots" / COMMIT_A
    assert lm.path == snapshot and (snapshot / "model.safetensors").is_file()
    assert (hub_cache / "models--planted-org--tiny-bert" / "refs" / "main").read_text() == COMMIT_A
    fetched = {
        path.rsplit("/", 1)[-1] for method, path in fake_hub.requested if method == "GET" and "/resolve/" in path
    }
    assert "model.safetensors" in fetched and "config.json" in fetched and "tokenizer.json" in fetched
    assert not any(p.endswith((".bin", ".msgpack")) for _, p in fake_hub.requested)
    assert not (snapshot / "pytorch_model.bin").exists()

    # now cached: loads again with the hub gone quiet, and offline
    before = len(fake_hub.requested)
    again = load_model("planted-org/tiny-bert", offline=True)
    assert again.fingerprint == lm.fingerprint and len(fake_hub.requested) == before
    # a tag and a legacy one-word name
    assert load_model("planted-org/tiny-bert@v2").revision == COMMIT_B
    assert load_model("legacy-tiny").revision == COMMIT_B


def test_models_pull_fetches_ahead_and_lists_the_cache(fake_hub, hub_cache):
    proc = run_cli("models", "pull", "planted-org/tiny-bert@v2")
    assert proc.returncode == 0, proc.stderr
    assert COMMIT_B in proc.stdout
    assert (hub_cache / "models--planted-org--tiny-bert" / "refs" / "v2").read_text() == COMMIT_B
    listed = run_cli("models")
    assert listed.returncode == 0 and "planted-org/tiny-bert@v2" in listed.stdout and "hub cache" in listed.stdout


@pytest.mark.parametrize(
    "name, words",
    [
        ("planted-org/nope", ["unknown model 'planted-org/nope'", "not a registry name", "has no repository"]),
        ("planted-org/tiny-bert@no-such-branch", ["has no revision 'no-such-branch'"]),
        (
            "planted-org/pickle-only",
            ["no safetensors weights", "pytorch_model.bin", "bertology.models.convert_to_safetensors"],
        ),
        ("planted-org/gated", ["gated", "log in", "HF_TOKEN"]),
    ],
)
def test_hub_refusals_are_one_clear_line(fake_hub, hub_cache, name, words):
    from bertology.models import load_model

    with pytest.raises(ModelError) as err:
        load_model(name)
    message = str(err.value)
    assert "\n" not in message and all(w in message for w in words), message
    assert not any(p.endswith(".bin") for _, p in fake_hub.requested)
    proc = run_cli("extract", "--model", name)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error:") and all(w in line for w in words), line


def test_an_unreachable_hub_says_where_it_looked(hub_cache, monkeypatch):
    """No server listening: one line naming the cache and the hub's address."""
    import socket

    from huggingface_hub import constants

    from bertology.models import load_model

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "2")
    with pytest.raises(ModelError) as err:
        load_model("org/somewhere")
    message = str(err.value)
    assert "\n" not in message and f"127.0.0.1:{port}" in message and "could not be reached" in message
    assert os.fspath(hub_cache) in message


@pytest.mark.slow  # a Streamlit AppTest run: ~7 s on 2 busy cores
def test_the_live_page_offers_and_loads_a_cached_hub_model(hub_cache, tiny_dirs, tmp_path, monkeypatch):
    """The Live page's model box lists the hub cache's models, and ``?model=org/name`` draws its maps."""
    from streamlit.testing.v1 import AppTest

    from bertology.apps.pages import live

    build_cache(hub_cache, "planted-org/tiny-bert", {COMMIT_A: folder_files(tiny_dirs[COMMIT_A])}, {"main": COMMIT_A})
    assert "planted-org/tiny-bert" in live.registry_names()
    monkeypatch.setenv("BERTOLOGY_RESULTS", str(tmp_path / "results"))
    monkeypatch.chdir(tmp_path)
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "apps" / "dashboard.py"), default_timeout=120)
    at.query_params["page"] = "Live"
    at.query_params["model"] = "planted-org/tiny-bert"
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.selectbox(key="live_model").value == "planted-org/tiny-bert"
    assert len(at.get("plotly_chart")) >= 1  # the model was loaded and its maps drawn


def test_a_store_of_a_hub_model_records_its_commit(hub_cache, tiny_dirs):
    """``bertology extract --model org/name``: the store's manifest names the commit, and the commit
    of another branch makes another store."""
    build_cache(
        hub_cache,
        "planted-org/tiny-bert",
        {c: folder_files(d) for c, d in tiny_dirs.items()},
        {"main": COMMIT_A, "v2": COMMIT_B},
    )
    stores = []
    for name, commit in (("planted-org/tiny-bert", COMMIT_A), ("planted-org/tiny-bert@v2", COMMIT_B)):
        proc = run_cli("extract", "--model", name, "--limit", "3", "--no-attentions")
        assert proc.returncode == 0, proc.stderr
        store = Path(proc.stdout.strip().splitlines()[-1])
        manifest = json.loads((store / "manifest.json").read_text())
        assert manifest["model"]["revision"] == commit and manifest["model"]["name"] == name
        stores.append(store)
    assert stores[0] != stores[1]


def test_sharded_weights_in_the_cache_load_and_pickles_in_the_cache_are_refused(hub_cache, tiny_dirs, tmp_path):
    """A sharded checkpoint's shards are links into blobs/ (outside the snapshot folder): allowed
    there; a cached snapshot with only pickled weights is refused offline, naming what it holds."""
    from transformers import BertModel

    from bertology.models import load_model

    sharded = tmp_path / "sharded"
    shutil.copytree(tiny_dirs[COMMIT_A], sharded)
    (sharded / "model.safetensors").unlink()
    BertModel.from_pretrained(tiny_dirs[COMMIT_A]).save_pretrained(sharded, max_shard_size="40KB")
    assert (sharded / "model.safetensors.index.json").is_file() and not (sharded / "model.safetensors").exists()
    build_cache(hub_cache, "org/sharded", {COMMIT_A: folder_files(sharded)}, {"main": COMMIT_A})
    lm = load_model("org/sharded")
    assert lm.revision == COMMIT_A and lm.fingerprint != load_model(tiny_dirs[COMMIT_A]).fingerprint

    files = folder_files(tiny_dirs[COMMIT_A])
    pickled = {
        "config.json": files["config.json"],
        "pytorch_model.bin": b"x",
        "tokenizer.json": files["tokenizer.json"],
    }
    build_cache(hub_cache, "org/pickled", {COMMIT_A: pickled}, {"main": COMMIT_A})
    with pytest.raises(
        ModelError, match=r"holds no config.json with safetensors weights \(it holds: .*pytorch_model.bin"
    ):
        load_model("org/pickled")


# --------------------------------------------------------------------------- (c) every place a model is named

MODEL_FIELDS = ("model", "other_model", "reference_model", "second_model")


def _cached_tiny(hub_cache, tiny_dirs) -> str:
    build_cache(hub_cache, "planted-org/tiny-bert", {COMMIT_A: folder_files(tiny_dirs[COMMIT_A])}, {"main": COMMIT_A})
    return "planted-org/tiny-bert"


def _one_line(message: str, *words: str) -> None:
    assert "\n" not in message and all(w in message for w in words), message


@pytest.mark.parametrize("field", MODEL_FIELDS)
def test_every_model_field_of_a_config_takes_a_cached_hub_name_and_refuses_none_in_resolves_line(
    hub_cache, tiny_dirs, field
):
    """``model``, alignment's ``other_model``, emergence's ``reference_model``, the quickstart's and
    tour's ``second_model``: a cached hub name passes; a name that is nothing fails in one line naming
    the field and what resolve looked at (the registry, folders, the cache, offline: how to pull)."""
    from bertology.errors import ConfigError
    from bertology.hub import HubError
    from bertology.validation import check_values

    name = _cached_tiny(hub_cache, tiny_dirs)
    check_values({field: name}, "alignment: x.yaml")
    check_values({field: f"{name}@{COMMIT_A}"}, "alignment: x.yaml")
    with pytest.raises(ConfigError) as err:
        check_values({field: "no-such-model"}, "alignment: x.yaml")
    _one_line(
        str(err.value),
        f"alignment: x.yaml: field {field!r}: unknown model 'no-such-model'",
        "not a registry name",
        "bertology models pull no-such-model",
    )
    with pytest.raises(HubError) as hub_err:  # org/name is meant for the hub: the hub's own line
        check_values({field: "org/absent"}, "alignment: x.yaml")
    _one_line(str(hub_err.value), "org/absent", "offline", "bertology models pull org/absent")
    if field != "model":  # "" and null: no second model
        check_values({field: ""}, "alignment: x.yaml")
        check_values({field: None}, "alignment: x.yaml")


@pytest.mark.parametrize(
    "study, overrides",
    [
        ("alignment", {"other_model": "no-such-model"}),
        ("emergence", {"reference_model": "no-such-model"}),
        ("patching", {"model": "org/absent"}),
        ("finetuning", {"model": "org/absent"}),
        ("quickstart", {"second_model": "no-such-model"}),
    ],
)
def test_a_study_naming_a_model_that_is_nothing_stops_before_any_folder(hub_cache, tmp_path, study, overrides):
    from bertology.errors import WorkbenchError
    from bertology.studies import run_study

    results = tmp_path / "results"
    [(field, name)] = overrides.items()
    with pytest.raises(WorkbenchError) as err:
        run_study(study, overrides=overrides, results_root=results, log=lambda m: None)
    _one_line(str(err.value), repr(name), f"bertology models pull {name}")
    assert not results.exists()


def test_a_sweep_over_hub_names_validates_every_cell_before_any_runs(hub_cache, tiny_dirs, tmp_path):
    from bertology.errors import ConfigError
    from bertology.studies import _sweeps

    name = _cached_tiny(hub_cache, tiny_dirs)
    results = tmp_path / "results"
    data = {"name": "hub", "study": "head_types", "config": {"limit": 3}, "grid": {"model": [name]}}
    [cell] = _sweeps.prepare_cells(_sweeps.parse_sweep(data), results)
    assert cell.values == {"model": name} and not results.exists()
    data["grid"]["model"] = [name, "no-such-model"]
    with pytest.raises(ConfigError) as err:
        _sweeps.prepare_cells(_sweeps.parse_sweep(data), results)
    _one_line(str(err.value), "cell model=no-such-model", "field 'model'", "bertology models pull no-such-model")
    assert not results.exists()


def test_a_teacher_or_init_from_is_a_hub_name_checked_with_the_recipe(hub_cache, tiny_dirs):
    from bertology.errors import ConfigError
    from bertology.pretraining.config import PretrainConfig

    name = _cached_tiny(hub_cache, tiny_dirs)
    tiny = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64, progress=False)
    assert PretrainConfig(**tiny, objective="distill", teacher=name, tokenizer=None).teacher == name
    assert PretrainConfig(**tiny, init_from=f"{name}@main", tokenizer=None).init_from == f"{name}@main"
    for field, kw in (("teacher", {"objective": "distill"}), ("init_from", {})):
        with pytest.raises(ConfigError) as err:
            PretrainConfig(**tiny, **kw, tokenizer=None, **{field: "org/absent"})
        _one_line(str(err.value), f"'{field}'", "org/absent", "bertology models pull org/absent")


def test_a_pretraining_variant_naming_a_teacher_that_is_nothing_stops_before_any_training(
    hub_cache, tiny_dirs, tmp_path
):
    from bertology.errors import ConfigError
    from bertology.studies import load_study, run_study
    from bertology.validation import check_values

    load_study("pretraining_variants")  # its rules are added when the study module is imported
    name = _cached_tiny(hub_cache, tiny_dirs)
    fine = {"mlm": {"objective": "mlm"}, "student": {"objective": "distill", "teacher": name}}
    check_values({"variants": fine, "base": {"init_from": name}}, "pretraining_variants: x.yaml")
    results = tmp_path / "results"
    bad = {**fine, "student": {"objective": "distill", "teacher": "no-such-model"}}
    with pytest.raises(ConfigError) as err:
        run_study("pretraining_variants", overrides={"variants": bad}, results_root=results, log=lambda m: None)
    _one_line(
        str(err.value),
        "field 'variants': variant 'student', field 'teacher': unknown model 'no-such-model'",
        "bertology models pull no-such-model",
    )
    with pytest.raises(ConfigError, match=r"field 'base': field 'init_from': unknown model 'x-absent'"):
        run_study("pretraining_variants", overrides={"base": {"init_from": "x-absent"}}, results_root=results)
    assert not results.exists()


def test_a_fine_tune_of_a_hub_name_that_is_nothing_stops_before_reading_the_task_or_making_a_folder(
    hub_cache, tmp_path
):
    from bertology.finetuning.config import FinetuneConfig
    from bertology.finetuning.trainer import run_finetuning

    config = FinetuneConfig(
        run_name="ft", model="org/absent", task=str(tmp_path / "no-task.jsonl"), output_root=str(tmp_path / "models")
    )
    with pytest.raises(ModelError) as err:
        run_finetuning(config)  # the task file does not exist either: the model is checked first
    _one_line(str(err.value), "org/absent", "bertology models pull org/absent")
    assert not (tmp_path / "models").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("finetune", "--task", "pos", "--max-steps", "1"),
        ("attribute", "--sentence", "the dog", "--word", "1"),
        ("patch", "--clean", "a [MASK]", "--corrupted", "b [MASK]", "--target", "is", "--foil", "are"),
        ("probe", "--task", "pos"),
        ("heads",),
        ("embeddings",),
        ("structural",),
    ],
)
def test_every_model_option_refuses_a_name_that_is_nothing_in_one_line(hub_cache, tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    proc = run_cli(*args, "--model", "org/absent", env={"BERTOLOGY_PROGRESS": "0"})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    _one_line(line, "error:", "org/absent", "bertology models pull org/absent")
    assert not (tmp_path / "results").exists()


def test_every_model_option_says_it_takes_hub_names_in_the_same_words():
    """One wording (bertology.hub.MODEL_NAME_HELP) for every --model of every command."""
    import click
    import typer

    from bertology.cli import app
    from bertology.hub import MODEL_NAME_HELP

    def commands(command: click.Command, path: str = ""):
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from commands(sub, f"{path} {name}".strip())

    seen = []
    for path, command in commands(typer.main.get_command(app)):
        for param in command.params:
            if "--model" in getattr(param, "opts", []):
                seen.append(path)
                assert MODEL_NAME_HELP.replace("[", r"\[") in (param.help or ""), (path, param.help)
    assert {"extract", "probe", "heads", "prune", "embeddings", "structural", "finetune", "attribute", "patch"} <= set(
        seen
    ), seen


def test_the_live_page_never_downloads_and_says_how_to_pull(fake_hub, hub_cache, tiny_dirs):
    """The dashboard only reads: a hub name the hub has but the cache does not is refused without a
    request, with a line saying to `bertology models pull` it; once pulled, it loads from the cache."""
    from bertology.apps.pages import live
    from bertology.errors import WorkbenchError

    name = "planted-org/tiny-bert"
    live.cached_model.clear()  # a model another test loaded under this name stays in the process's cache
    with pytest.raises(WorkbenchError) as err:
        live.cached_model(name)
    assert fake_hub.requested == []  # nothing asked of the hub, nothing downloaded
    line = live.refusal(name, err.value)
    _one_line(line, repr(name), "never downloads", f"bertology models pull {name}", "hf-cache")
    assert not (hub_cache / "models--planted-org--tiny-bert" / "snapshots").exists()
    typo = "no-such-model"
    with pytest.raises(WorkbenchError) as err:
        live.cached_model(typo)
    assert "bertology models pull no-such-model" in live.refusal(typo, err.value) and fake_hub.requested == []
    assert run_cli("models", "pull", name).returncode == 0
    lm = live.cached_model(name)
    assert lm.revision == COMMIT_A
    live.cached_model.clear()
