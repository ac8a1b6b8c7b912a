"""Post-training quantization of an encoder's Linear layers, measured against float32.

Two kinds, and the difference matters when reading the numbers:

- **real int8** (:func:`dynamic_int8`): ``torch.ao.quantization.quantize_dynamic`` replaces every
  ``nn.Linear`` inside the encoder's layer list with torch's dynamically quantized Linear: int8
  weights (one scale per tensor, torch's default, or per output channel with ``per_channel``),
  activations quantized per batch at run time, int8 GEMM kernels (fbgemm / x86 / onednn /
  qnnpack). Its serialized size and its forward time are real.
- **simulated b-bit** (:func:`simulate_weight_quantization`, b in 2..8): each Linear weight of the
  encoder layers is rounded to the nearest of ``2^b - 1`` symmetric levels ``scale * k``,
  ``|k| <= 2^(b-1) - 1``, per output channel (or per group of input columns; 2 bits: -1, 0, 1)
  and *dequantized back to float32*; the model runs float32
  kernels. Quality numbers are what b-bit weights give; the size is the theoretical packed size
  (b bits per weight plus one float32 scale per channel or group); there is no speed-up.

Embeddings, layer norms and any task / MLM head stay float32 in both kinds: only the Linear layers
of the transformer layers (the architecture table's layer list) are quantized.

:func:`task_quantization` does the same for a fine-tuned classifier on its task: test accuracy per
setting with a bootstrap interval and a paired difference to float32 on the same examples.

:func:`compare_quantization` runs every :class:`QuantSetting` in one process on the same batches
and returns one row per setting (size, MLM loss, hidden-state change, forward time) and one row per
(setting, layer) of relative hidden-state change.

Devices: float32 and the simulated settings run where the model is (a GPU too); batches are moved
there and hidden states come back to the CPU. Real int8 exists on the CPU only (torch's dynamic
quantization has no GPU kernels): :func:`dynamic_int8` quantizes a CPU copy, and the comparisons
(:func:`compare_quantization`, :func:`task_quantization`) give a model on a GPU an int8 row of NaNs
whose note says so (:func:`int8_cpu_only`) rather than comparing a CPU int8 model with a GPU float32
one; :func:`quantized_probing` extracts the int8 model's store on the CPU.
"""

from __future__ import annotations

import copy
import io
import math
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import pandas as pd
import torch
from torch import nn

from bertology.architectures import architecture_for, get_module
from bertology.errors import ConfigError, ModelError
from bertology.models import model_device, to_device
from bertology.probes.heads.importance import mean_loss, mlm_loss, model_inputs

Batch = dict[str, torch.Tensor]
SIMULATED_NOTE = "simulated: weights quantize-dequantized to float32, no speed-up"
SIMULATED_BITS = (8, 4, 3, 2)
SCALE_BYTES = 4  # one float32 scale per output channel (or per group) in the theoretical packed size


@dataclass(frozen=True)
class QuantSetting:
    """One way of running the encoder: ``kind`` is ``"float32"``, ``"int8-dynamic"`` (real int8
    kernels; ``per_channel``: one weight scale per output channel instead of per tensor) or
    ``"simulated"`` (``bits`` in 2..8, ``group_size`` input columns per scale, None = one scale per
    output channel)."""

    kind: str
    bits: int = 32
    group_size: int | None = None
    per_channel: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("float32", "int8-dynamic", "simulated"):
            raise ConfigError(f"QuantSetting.kind: {self.kind!r} is not float32, int8-dynamic or simulated")
        if self.kind == "simulated" and not 2 <= self.bits <= 8:
            raise ConfigError(f"QuantSetting.bits: {self.bits} (simulated weights take 2..8 bits)")
        if self.group_size is not None and (self.kind != "simulated" or self.group_size < 1):
            raise ConfigError(f"QuantSetting.group_size: {self.group_size} (a positive size, simulated only)")
        if self.per_channel and self.kind != "int8-dynamic":
            raise ConfigError("QuantSetting.per_channel: for int8-dynamic only (simulated bits are per channel)")

    @property
    def name(self) -> str:
        if self.kind == "simulated":
            return f"simulated-{self.bits}bit" + (f"-g{self.group_size}" if self.group_size else "")
        return self.kind + ("-per-channel" if self.per_channel else "")


DEFAULT_SETTINGS = (QuantSetting("float32"), QuantSetting("int8-dynamic"), QuantSetting("simulated", 4))
SUMMARY_COLUMNS = [
    "setting",
    "kind",
    "bits",
    "real_kernels",
    "size_bytes",
    "size_kind",
    "size_ratio",
    "mlm_loss",
    "max_relative_change",
    "mean_relative_change",
    "pooled_cosine",
    "seconds",
    "cpu_seconds",
    "speedup",
    "threads",
    "note",
]


# ---------------------------------------------------------------- which layers


def encoder_linear_names(model: nn.Module) -> list[str]:
    """Qualified names (``model.named_modules()``) of every ``nn.Linear`` inside the encoder's
    layer list (the architecture table's ``layers``): attention projections and feed-forward
    blocks; never embeddings, pooler or task / MLM heads. Raises ``ModelError`` when none is found."""
    base = getattr(model, "base_model", model)
    layers = get_module(base, architecture_for(model).layers)
    if layers is None:
        raise ModelError(f"{type(model).__name__}: no layer list at {architecture_for(model).layers!r}")
    inside = {id(m) for m in layers.modules() if isinstance(m, nn.Linear)}
    names = [name for name, m in model.named_modules() if id(m) in inside]
    if not names:
        raise ModelError(f"{type(model).__name__}: no nn.Linear inside the encoder layers")
    return names


# ---------------------------------------------------------------- simulated b-bit weights


def fake_quantize_weight(
    weight: torch.Tensor, bits: int, group_size: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric round-to-nearest quantize-dequantize of a weight ``[out, in]`` to ``bits`` bits.

    Levels are ``scale * k`` for integers ``|k| <= qmax = 2^(bits-1) - 1`` (2 bits: -1, 0, 1); one
    scale per output channel (``group_size`` None) or per ``group_size`` consecutive input columns,
    ``scale = max|w| / qmax`` over the channel / group, so nothing is clipped and
    ``|w - q(w)| <= scale / 2`` everywhere. An all-zero channel keeps scale 0 and stays zero.
    Returns ``(dequantized [out, in] float32, scales [out, groups])``."""
    if not 2 <= bits <= 8:
        raise ConfigError(f"bits: {bits} (simulated weights take 2..8 bits)")
    w = weight.detach().float()
    if w.dim() != 2:
        raise ModelError(f"weight of shape {tuple(w.shape)}: expected [out, in]")
    out_features, in_features = w.shape
    group = group_size or in_features
    if in_features % group:
        raise ConfigError(f"group_size: {group_size} does not divide the {in_features} input columns")
    grouped = w.reshape(out_features, in_features // group, group)  # [out, groups, group]
    qmax = 2 ** (bits - 1) - 1
    scales = grouped.abs().amax(dim=-1) / qmax  # [out, groups]
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))[..., None]
    levels = torch.clamp(torch.round(grouped / safe), -qmax, qmax)
    return (levels * safe).reshape(out_features, in_features), scales  # a zero group: levels 0 -> stays 0


@torch.no_grad()
def simulate_weight_quantization(model: nn.Module, bits: int, group_size: int | None = None) -> nn.Module:
    """A copy of ``model`` whose encoder Linear weights are :func:`fake_quantize_weight`-ed
    (float32 weights on the b-bit grid; float32 kernels: **simulated**, no speed-up). The original
    is untouched."""
    quantized = copy.deepcopy(model).eval()
    for name in encoder_linear_names(quantized):
        linear = cast(nn.Linear, quantized.get_submodule(name))
        q, _ = fake_quantize_weight(linear.weight, bits, group_size)
        linear.weight.copy_(q.to(linear.weight.dtype))
    return quantized


def theoretical_packed_bytes(model: nn.Module, bits: int, group_size: int | None = None) -> int:
    """Bytes of ``model`` stored with its encoder Linear weights packed at ``bits`` bits each plus
    one float32 scale per output channel (or group), everything else (biases, embeddings, norms,
    heads; tied tensors once) at 4 bytes per value. Theoretical: no file format is written."""
    linear_weights = {
        id(model.get_submodule(n).weight): model.get_submodule(n).weight for n in encoder_linear_names(model)
    }
    total = 0
    for p in {id(p): p for p in model.parameters()}.values():
        if id(p) in linear_weights:
            out_features, in_features = p.shape
            groups = in_features // (group_size or in_features)
            total += math.ceil(p.numel() * bits / 8) + out_features * groups * SCALE_BYTES
        else:
            total += p.numel() * 4
    return total


# ---------------------------------------------------------------- real int8 (torch's dynamic quantization)


def int8_engine() -> tuple[str | None, str]:
    """``(engine, reason)``: the quantized engine torch uses on this CPU (``x86``, ``fbgemm``,
    ``onednn``, ``qnnpack``), or None with the reason dynamic int8 cannot run here."""
    if not hasattr(torch, "ao") or not hasattr(torch.ao, "quantization"):
        return None, f"torch {torch.__version__} has no torch.ao.quantization"
    engines = [e for e in torch.backends.quantized.supported_engines if e != "none"]
    if not engines:
        return None, f"torch {torch.__version__} was built without a quantized engine (supported: none)"
    engine = torch.backends.quantized.engine
    return (engine if engine in engines else engines[0]), f"quantized engine {engine} of {engines}"


def int8_cpu_only(model: nn.Module) -> str | None:
    """Why real int8 cannot be compared with ``model`` where it is, or None on the CPU: torch's
    dynamic quantization has CPU kernels only."""
    device = model_device(model)
    if device.type == "cpu":
        return None
    return (
        f"int8-dynamic runs on the CPU only (torch's dynamic quantization has no {device.type} kernels) and "
        f"the model is on {device}: compare it with the model on the CPU (model.cpu()), or leave int8-dynamic out"
    )


def dynamic_int8(model: nn.Module, per_channel: bool = False) -> tuple[nn.Module | None, str]:
    """``(quantized copy, note)``: ``torch.ao.quantization.quantize_dynamic`` (qint8) of the
    encoder Linear layers of a CPU float32 copy of ``model`` (weights: one scale per tensor, or per
    output channel with ``per_channel``), checked with one forward pass; or
    ``(None, reason)`` when this torch / CPU cannot (no engine, or the call or the check raised).
    The copy is on the CPU whatever ``model``'s device (int8 has CPU kernels only; the note says so
    for a model elsewhere): give it CPU batches. torch marks ``torch.ao.quantization`` deprecated;
    its warnings are silenced here and the note says which engine ran."""
    engine, note = int8_engine()
    if engine is None:
        return None, note
    if model_device(model).type != "cpu":
        note += f"; a CPU copy of the model on {model_device(model)} (int8 kernels exist on the CPU only)"
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*(deprecated|quantize_per).*")
            torch.backends.quantized.engine = engine
            qconfig = (
                torch.ao.quantization.per_channel_dynamic_qconfig
                if per_channel
                else torch.ao.quantization.default_dynamic_qconfig
            )
            spec = {name: qconfig for name in encoder_linear_names(model)}
            quantized = torch.ao.quantization.quantize_dynamic(
                copy.deepcopy(model).float().cpu().eval(), spec, dtype=torch.qint8
            )
            probe = torch.zeros(1, 4, dtype=torch.long)
            with torch.no_grad():
                getattr(quantized, "base_model", quantized)(input_ids=probe)
    except (RuntimeError, NotImplementedError, AssertionError) as exc:
        return None, f"dynamic int8 failed on this CPU ({note}): {type(exc).__name__}: {exc}"
    scales = "per-channel" if per_channel else "per-tensor"
    return quantized, f"real int8 kernels ({scales} weight scales, activations per batch), {note}"


def serialized_bytes(model: nn.Module) -> int:
    """Bytes of ``torch.save(model.state_dict())`` (in memory; int8 packed weights included as
    torch stores them)."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(deprecated|quantize_per).*")
        torch.save(model.state_dict(), buffer)
    return buffer.getbuffer().nbytes


# ---------------------------------------------------------------- measuring against float32


def encode_sentences(tokenizer, sentences: Sequence, batch_size: int = 16, max_length: int = 128) -> list[Batch]:
    """Tokenised batches (``input_ids``, ``attention_mask``, ...) ``[batch, tokens]`` of
    ``sentences`` (strings, word lists, or corpus ``Sentence``s), in order."""
    texts = [s if isinstance(s, str) else " ".join(getattr(s, "words", s)) for s in sentences]
    batches = []
    for start in range(0, len(texts), batch_size):
        enc = tokenizer(
            texts[start : start + batch_size], truncation=True, max_length=max_length, padding=True, return_tensors="pt"
        )
        batches.append(model_inputs(dict(enc)))
    return batches


@torch.no_grad()
def hidden_states(model: nn.Module, batches: Sequence[Batch]) -> list[torch.Tensor]:
    """Per batch, the encoder's hidden states ``[layers + 1, batch, tokens, dim]`` (index 0 =
    embeddings) as float32 CPU tensors (the batches run on the model's device)."""
    encoder = getattr(model, "base_model", model)
    device = model_device(model)
    return [
        torch.stack(encoder(**to_device(model_inputs(b), device), output_hidden_states=True).hidden_states)
        .float()
        .cpu()
        for b in batches
    ]


def relative_changes(
    reference: Sequence[torch.Tensor], other: Sequence[torch.Tensor], batches: Sequence[Batch]
) -> pd.DataFrame:
    """Per layer, ``‖h' - h‖ / ‖h‖`` of each real (non-padding) token's hidden state, ``h`` from
    ``reference``: columns ``layer, max_relative_change, mean_relative_change`` (one row per hidden
    layer, 0 = embeddings). Inputs: per batch ``[layers + 1, batch, tokens, dim]``."""
    per_layer: list[torch.Tensor] = []
    for ref, new, batch in zip(reference, other, batches):
        mask = batch.get("attention_mask", torch.ones(ref.shape[1:3])).bool()  # [batch, tokens]
        change = (new - ref).norm(dim=-1) / ref.norm(dim=-1).clamp(min=1e-12)  # [layers, batch, tokens]
        per_layer.append(change[:, mask])  # [layers, real tokens]
    changes = torch.cat(per_layer, dim=1).double()
    return pd.DataFrame(
        {
            "layer": range(changes.shape[0]),
            "max_relative_change": changes.amax(1).numpy(),
            "mean_relative_change": changes.mean(1).numpy(),
        }
    )


def pooled_cosines(
    reference: Sequence[torch.Tensor], other: Sequence[torch.Tensor], batches: Sequence[Batch]
) -> torch.Tensor:
    """Cosine ``[sentences]`` between the float32 and the quantized sentence vectors: the last
    hidden layer mean-pooled over real tokens (how a sentence-embedding model such as MiniLM is
    used). Inputs: per batch ``[layers + 1, batch, tokens, dim]``."""
    out = []
    for ref, new, batch in zip(reference, other, batches):
        mask = batch.get("attention_mask", torch.ones(ref.shape[1:3])).float()[..., None]  # [batch, tokens, 1]
        pool = [(h[-1] * mask).sum(1) / mask.sum(1).clamp(min=1) for h in (ref, new)]  # [batch, dim]
        out.append(nn.functional.cosine_similarity(pool[0], pool[1], dim=-1))
    return torch.cat(out)


@torch.no_grad()
def forward_seconds(
    models: Sequence[nn.Module], batches: Sequence[Batch], repeat: int = 5
) -> list[tuple[float, float]]:
    """Per model, ``(median wall seconds, median CPU seconds of this process)`` of one encoder
    forward pass over all ``batches``, with torch's current thread count. The models take turns
    (one warm-up round, then ``repeat`` rounds of one pass each), so load from other processes on
    a shared machine falls on all of them alike rather than on whichever ran last. Each model runs
    on its own device (the batches moved there before timing; a GPU's queued work is waited for)."""
    encoders = [getattr(m, "base_model", m) for m in models]
    devices = [model_device(m) for m in models]
    inputs = {d: [to_device(model_inputs(b), d) for b in batches] for d in dict.fromkeys(devices)}
    wall: list[list[float]] = [[] for _ in encoders]
    cpu: list[list[float]] = [[] for _ in encoders]

    def sync(device: torch.device) -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for round_ in range(repeat + 1):
        for k, encoder in enumerate(encoders):
            sync(devices[k])
            c0, t0 = time.process_time(), time.perf_counter()
            for batch in inputs[devices[k]]:
                encoder(**batch)
            sync(devices[k])
            if round_:  # round 0 warms thread pools and packed-weight caches
                wall[k].append(time.perf_counter() - t0)
                cpu[k].append(time.process_time() - c0)
    return [(statistics.median(w), statistics.median(c)) for w, c in zip(wall, cpu)]


def quantized_model(model: nn.Module, setting: QuantSetting, *, cpu_copy: bool = False) -> tuple[nn.Module | None, str]:
    """``(model run under setting, note)``; None with the reason when int8 cannot run here: no
    engine, or ``model`` is not on the CPU (:func:`int8_cpu_only`) unless ``cpu_copy`` (then int8
    runs on a CPU copy and the note says so)."""
    if setting.kind == "float32":
        return model, "reference"
    if setting.kind == "int8-dynamic":
        refusal = None if cpu_copy else int8_cpu_only(model)
        if refusal:
            return None, refusal
        return dynamic_int8(model, setting.per_channel)
    return simulate_weight_quantization(model, setting.bits, setting.group_size), SIMULATED_NOTE


def setting_size(model: nn.Module, run: nn.Module, setting: QuantSetting) -> tuple[int, str, float]:
    """``(bytes, kind, ratio to float32 of the same kind)``: serialized state dicts for float32 and
    real int8, the theoretical packed size for simulated bits (against 4 bytes per parameter)."""
    if setting.kind == "simulated":
        size = theoretical_packed_bytes(model, setting.bits, setting.group_size)
        return size, "theoretical", size / (4 * sum(p.numel() for p in model.parameters()))
    size = serialized_bytes(run)
    return size, "serialized", size / serialized_bytes(model)


def _setting_row(setting: QuantSetting, note: str) -> dict:
    """The columns every per-setting row starts with: ``setting, kind, bits, real_kernels, threads, note``."""
    return {
        "setting": setting.name,
        "kind": setting.kind,
        "bits": 8 if setting.kind == "int8-dynamic" else setting.bits,
        "real_kernels": setting.kind != "simulated",
        "threads": torch.get_num_threads(),
        "note": note,
    }


def _add_forward_times(model: nn.Module, runs: list[tuple[dict, nn.Module]], batches: list[Batch], repeat: int) -> None:
    """Fill ``seconds``, ``cpu_seconds`` and ``speedup`` of each ``(row, run)``: float32 (``run is
    model``) and every setting taking turns (:func:`forward_seconds`); a speed-up only where real
    low-precision kernels ran (NaN for simulated bits: float32 kernels)."""
    others = [(row, run) for row, run in runs if run is not model]  # float32 itself is the baseline
    base, *timings = forward_seconds([model] + [run for _, run in others], batches, repeat)
    for row, run in runs:
        if run is model:
            row["seconds"], row["cpu_seconds"], row["speedup"] = *base, 1.0
    for (row, _), (seconds, cpu_seconds) in zip(others, timings):
        row["seconds"], row["cpu_seconds"] = seconds, cpu_seconds
        row["speedup"] = base[0] / seconds if row["real_kernels"] else math.nan


def compare_quantization(
    model: nn.Module,
    batches: Sequence[Batch],
    *,
    settings: Sequence[QuantSetting] = DEFAULT_SETTINGS,
    mlm_batches: Sequence[Batch] | None = None,
    repeat: int = 5,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every setting against float32, in this process, on the same ``batches`` and threads.

    ``model``: a float32 encoder (an MLM model gives MLM loss on ``mlm_batches``, the
    :func:`~bertology.probes.heads.importance.mask_batches` output; else ``mlm_loss`` is NaN), on the
    CPU for the real int8 row (on a GPU that row says int8 runs on the CPU only; the other settings
    run on the GPU).
    Returns ``(summary, layers)``. ``summary``: one row per setting -- ``setting, kind, bits,
    real_kernels, size_bytes, size_kind, size_ratio, mlm_loss, max_relative_change,
    mean_relative_change`` (over layers and tokens), ``pooled_cosine`` (mean over sentences of
    :func:`pooled_cosines`), ``seconds`` / ``cpu_seconds`` (median wall / process CPU time of one
    forward pass of the encoder over all batches, float32 and every setting taking turns:
    :func:`forward_seconds`), ``speedup`` (float32 wall seconds / seconds; real int8 only, NaN for
    simulated: its float32 kernels cost what float32 costs, any difference is noise),
    ``threads, note``. ``layers``: ``setting, layer, max_relative_change, mean_relative_change``.
    A setting that cannot run here (no int8 engine) gets a row of NaNs whose note says why."""
    model = model.eval()
    batches = list(batches)
    reference = hidden_states(model, batches)
    rows, runs, layer_tables = [], [], []
    for setting in settings:
        run, note = quantized_model(model, setting)
        row = _setting_row(setting, note)
        if run is not None:
            measured, layers = _measure(model, run, setting, reference, batches, mlm_batches)
            row |= measured
            runs.append((row, run))
            layer_tables.append(layers.assign(setting=setting.name))
        rows.append(row)
    _add_forward_times(model, runs, batches, repeat)
    summary = pd.DataFrame(rows).reindex(columns=SUMMARY_COLUMNS)
    columns = ["setting", "layer", "max_relative_change", "mean_relative_change"]
    layer_table = pd.concat(layer_tables, ignore_index=True)[columns] if layer_tables else pd.DataFrame(columns=columns)
    return summary, layer_table


def _measure(
    model: nn.Module,
    run: nn.Module,
    setting: QuantSetting,
    reference: list[torch.Tensor],
    batches: list[Batch],
    mlm_batches: Sequence[Batch] | None,
) -> tuple[dict, pd.DataFrame]:
    """Size, MLM loss and hidden-state change of ``run`` (``model`` under ``setting``)."""
    row: dict = {}
    row["size_bytes"], row["size_kind"], row["size_ratio"] = setting_size(model, run, setting)
    if mlm_batches is not None:
        row["mlm_loss"] = mean_loss(run, list(mlm_batches), mlm_loss)
    states = hidden_states(run, batches)
    layers = relative_changes(reference, states, batches)
    row["max_relative_change"] = float(layers["max_relative_change"].max())
    row["mean_relative_change"] = float(layers["mean_relative_change"].mean())
    row["pooled_cosine"] = float(pooled_cosines(reference, states, batches).double().mean())
    return row, layers


TaskScoresFn = Callable[[nn.Module, "torch.Tensor | None", Sequence[Batch]], tuple[np.ndarray, np.ndarray]]
TASK_COLUMNS = [
    "setting",
    "kind",
    "bits",
    "real_kernels",
    "accuracy",
    "low",
    "high",
    "difference",
    "difference_low",
    "difference_high",
    "p_value",
    "n_examples",
    "n_items",
    "small_sample",
    "size_bytes",
    "size_kind",
    "size_ratio",
    "seconds",
    "speedup",
    "threads",
    "note",
]


def task_quantization(
    model: nn.Module,
    batches: Sequence[Batch],
    sentence_scores: TaskScoresFn,
    *,
    settings: Sequence[QuantSetting] = DEFAULT_SETTINGS,
    repeat: int = 5,
    seed: int = 0,
) -> pd.DataFrame:
    """A fine-tuned classifier's task accuracy under every setting against float32, on the same test
    ``batches``, in this process.

    ``sentence_scores(model, None, batches) -> (correct, scored)`` per example (e.g.
    :func:`bertology.probes.heads.pruning.classifier_sentence_scores`). One row per setting
    (:data:`TASK_COLUMNS`): ``accuracy`` with a 95% bootstrap interval over examples (``low``,
    ``high``), ``difference`` to float32 on the same examples with its paired-bootstrap interval and
    p-value, the size (serialized for float32 / real int8, theoretical packed for simulated bits) and
    the median forward time over ``batches`` (float32 and the settings taking turns); ``speedup``
    only for real int8 kernels (simulated bits run float32 kernels: NaN). A setting that cannot run
    here gets NaNs and its note says why."""
    from bertology.uncertainty import is_small_sample, paired_bootstrap, ratio_bootstrap

    model = model.eval()
    batches = list(batches)
    base_correct, base_scored = sentence_scores(model, None, batches)
    rows, runs = [], []
    for setting in settings:
        run, note = quantized_model(model, setting)
        row = _setting_row(setting, note)
        if run is not None:
            correct, scored = (base_correct, base_scored) if run is model else sentence_scores(run, None, batches)
            iv = ratio_bootstrap(correct, scored, seed=seed)
            diff = paired_bootstrap(correct, base_correct, scored, base_scored, seed=seed)
            row |= {
                "accuracy": iv.estimate,
                "low": iv.low,
                "high": iv.high,
                "difference": diff.difference,
                "difference_low": diff.low,
                "difference_high": diff.high,
                "p_value": diff.p_value,
                "n_examples": int(np.asarray(scored).size),
                "n_items": int(np.asarray(scored).sum()),
                "small_sample": is_small_sample(int(np.asarray(scored).sum())),
            }
            row["size_bytes"], row["size_kind"], row["size_ratio"] = setting_size(model, run, setting)
            runs.append((row, run))
        rows.append(row)
    _add_forward_times(model, runs, batches, repeat)
    return pd.DataFrame(rows).reindex(columns=TASK_COLUMNS)


PROBING_COLUMNS = [
    "setting",
    "kind",
    "bits",
    "layer",
    "accuracy",
    "low",
    "high",
    "difference",
    "difference_low",
    "difference_high",
    "p_value",
    "n_test_sentences",
    "n_test_items",
    "probe_task",
    "note",
]


def quantized_probing(
    lm, corpus, *, settings: Sequence[QuantSetting] = DEFAULT_SETTINGS, task: str = "pos", seed: int = 0, root=None
) -> pd.DataFrame:
    """What each layer still makes linearly readable when the encoder runs quantized: a linear edge
    probe of ``task`` per layer (Tenney et al.'s per-layer probe, the ``linear`` probe, probe seed and
    sentence split ``seed``, the same for every setting) trained and tested on the hidden states of
    ``lm.model`` run under each setting (float32 is the reference), over ``corpus``.

    Returns :data:`PROBING_COLUMNS`, one row per setting and hidden-state layer: test ``accuracy``
    with a 95% bootstrap interval over test sentences, and ``difference`` to float32 at that layer
    on the same test sentences (paired bootstrap interval and p-value). A setting that cannot run
    here gets one row with its note. Stores go to ``root`` (a temporary folder when None)."""
    import dataclasses
    import hashlib
    import tempfile

    from bertology.probes.probing import probe_layers
    from bertology.store import extract
    from bertology.uncertainty import paired_bootstrap, ratio_bootstrap

    def per_layer(sentences: pd.DataFrame) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        acc = sentences[sentences["metric"] == "accuracy"].sort_values(["layer", "sentence"])
        return {
            int(layer): (g["numerator"].to_numpy(float), g["denominator"].to_numpy(float))
            for layer, g in acc.groupby("layer")
        }

    rows, reference = [], None
    with tempfile.TemporaryDirectory(dir=root, prefix="quantized-stores-") as stores:
        for setting in settings:
            run, note = quantized_model(lm.model, setting, cpu_copy=True)  # int8: extracted on the CPU
            base = {**_setting_row(setting, note), "probe_task": task}
            if run is None:
                rows.append(base)
                continue
            fingerprint = hashlib.sha256(f"{lm.fingerprint}:{setting.name}".encode()).hexdigest()
            quantized = dataclasses.replace(lm, model=run, fingerprint=fingerprint)
            store = extract(quantized, corpus, attentions=False, root=stores, progress=False)
            _, sentences = probe_layers(
                store, corpus, task, seeds=(int(seed),), split_seed=int(seed), probe="linear", test_sentences=True
            )
            layers = per_layer(sentences)
            if reference is None:
                reference = layers
            for layer, (numerator, denominator) in layers.items():
                iv = ratio_bootstrap(numerator, denominator, seed=seed)
                diff = paired_bootstrap(numerator, reference[layer][0], denominator, reference[layer][1], seed=seed)
                rows.append(
                    {
                        **base,
                        "layer": layer,
                        "accuracy": iv.estimate,
                        "low": iv.low,
                        "high": iv.high,
                        "difference": diff.difference,
                        "difference_low": diff.low,
                        "difference_high": diff.high,
                        "p_value": diff.p_value,
                        "n_test_sentences": int(numerator.size),
                        "n_test_items": int(denominator.sum()),
                    }
                )
    return pd.DataFrame(rows).reindex(columns=PROBING_COLUMNS)
