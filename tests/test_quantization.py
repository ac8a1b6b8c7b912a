"""Quantization of an encoder's Linear layers (bertology.probes.compression.quantization): the
quantize-dequantize error bound per bit width, zero weights, simulated 8 vs 2 bits, real dynamic
int8 on a tiny model, the theoretical packed size, and the comparison table. No timing asserts."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from bertology.errors import ConfigError
from bertology.probes.compression import (
    QuantSetting,
    compare_quantization,
    dynamic_int8,
    encoder_linear_names,
    fake_quantize_weight,
    forward_seconds,
    hidden_states,
    int8_engine,
    pooled_cosines,
    relative_changes,
    serialized_bytes,
    simulate_weight_quantization,
    theoretical_packed_bytes,
)
from bertology.probes.compression import quantization as qz
from bertology.testing import pair_batches, tiny_bert


def inputs_only(batches):
    return [{k: v for k, v in b.items() if k != "labels"} for b in batches]


@pytest.mark.parametrize("bits", [8, 4, 3, 2])
@pytest.mark.parametrize("group_size", [None, 8])
def test_quantize_dequantize_error_is_within_half_a_step(bits, group_size):
    gen = torch.Generator().manual_seed(bits)
    weight = torch.randn(16, 32, generator=gen) * torch.linspace(0.01, 3.0, 16)[:, None]  # channels of any scale
    q, scales = fake_quantize_weight(weight, bits, group_size)
    group = group_size or 32
    assert scales.shape == (16, 32 // group)
    qmax = 2 ** (bits - 1) - 1
    expected_scales = weight.reshape(16, -1, group).abs().amax(-1) / qmax
    torch.testing.assert_close(scales, expected_scales)
    step = scales.repeat_interleave(group, dim=1)  # [out, in]
    assert ((weight - q).abs() <= step / 2 + 1e-6).all()
    levels = q / step
    torch.testing.assert_close(levels, levels.round(), atol=1e-4, rtol=0)  # on the grid
    assert levels.abs().max() <= qmax + 1e-4  # symmetric range
    per_group = [
        len(torch.unique(levels.reshape(16, -1, group)[o, g].round())) for o in range(16) for g in range(32 // group)
    ]
    assert max(per_group) <= 2 * qmax + 1
    # the largest weight of each channel / group is on the grid exactly (nothing is clipped)
    big = weight.reshape(16, -1, group).abs().argmax(-1, keepdim=True)
    torch.testing.assert_close(q.reshape(16, -1, group).gather(-1, big), weight.reshape(16, -1, group).gather(-1, big))


def test_two_bits_are_ternary_and_eight_bits_are_close():
    weight = torch.tensor([[1.0, 0.4, -0.6, 0.0], [-2.0, 0.9, 1.1, -0.2]])  # 0.9 / 2 = 0.45 rounds to 0
    q2, s2 = fake_quantize_weight(weight, 2)
    torch.testing.assert_close(s2, torch.tensor([[1.0], [2.0]]))
    torch.testing.assert_close(q2, torch.tensor([[1.0, 0.0, -1.0, 0.0], [-2.0, 0.0, 2.0, 0.0]]))
    q8, s8 = fake_quantize_weight(weight, 8)
    assert (weight - q8).abs().max() <= s8.max() / 2 + 1e-7 and s8.max() == pytest.approx(2 / 127)


def test_zero_weights_stay_zero():
    q, scales = fake_quantize_weight(torch.zeros(4, 8), 2)
    assert torch.equal(q, torch.zeros(4, 8)) and torch.equal(scales, torch.zeros(4, 1))
    model = tiny_bert(mlm=True)
    name = encoder_linear_names(model)[0]
    with torch.no_grad():
        model.get_submodule(name).weight.zero_()
        model.get_submodule(name).weight[1] = 0.5  # one non-zero row
    sim = simulate_weight_quantization(model, 3)
    weight = sim.get_submodule(name).weight
    assert torch.equal(weight[0], torch.zeros_like(weight[0])) and torch.equal(weight[2:], torch.zeros_like(weight[2:]))
    assert torch.allclose(weight[1], torch.full_like(weight[1], 0.5))
    assert torch.isfinite(torch.cat([p.flatten() for p in sim.parameters()])).all()


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError, match="bits"):
        fake_quantize_weight(torch.ones(2, 4), 1)
    with pytest.raises(ConfigError, match="group_size"):
        fake_quantize_weight(torch.ones(2, 6), 4, group_size=4)
    with pytest.raises(ConfigError, match="kind"):
        QuantSetting("int4")
    with pytest.raises(ConfigError, match="group_size"):
        QuantSetting("int8-dynamic", group_size=32)
    with pytest.raises(ConfigError, match="per_channel"):
        QuantSetting("simulated", 4, per_channel=True)
    assert QuantSetting("simulated", 4, 16).name == "simulated-4bit-g16"
    assert QuantSetting("int8-dynamic", per_channel=True).name == "int8-dynamic-per-channel"


def test_only_the_encoder_layers_linears_are_chosen():
    model = tiny_bert(mlm=True, layers=2)
    names = encoder_linear_names(model)
    assert len(names) == 2 * 6  # q, k, v, attention out, intermediate, output
    assert all(n.startswith("bert.encoder.layer.") for n in names)
    sim = simulate_weight_quantization(model, 2)
    # the MLM head (tied to the word embeddings) and the embeddings are untouched; the original too
    assert torch.equal(sim.cls.predictions.transform.dense.weight, model.cls.predictions.transform.dense.weight)
    assert torch.equal(sim.bert.embeddings.word_embeddings.weight, model.bert.embeddings.word_embeddings.weight)
    assert not torch.equal(sim.get_submodule(names[0]).weight, model.get_submodule(names[0]).weight)


def test_simulated_eight_bits_barely_move_the_outputs_and_two_bits_move_them_a_lot():
    model = tiny_bert(mlm=True, hidden=64)
    batches = inputs_only(pair_batches(2))
    reference = hidden_states(model, batches)
    change = {
        bits: relative_changes(reference, hidden_states(simulate_weight_quantization(model, bits), batches), batches)
        for bits in (8, 2)
    }
    assert change[8]["max_relative_change"].max() < 2e-3
    assert change[2]["mean_relative_change"].iloc[-1] > 0.01
    assert change[2]["mean_relative_change"].iloc[-1] > 30 * change[8]["mean_relative_change"].iloc[-1]
    assert change[8]["max_relative_change"].iloc[0] == 0.0  # embeddings are not quantized


def test_relative_changes_known_answer_ignores_padding():
    ref = torch.ones(2, 1, 3, 4)  # [layers + 1, batch, tokens, dim]
    new = ref.clone()
    new[1, 0, 0] = 1.5  # token 0: ‖0.5·1‖ / ‖1‖ = 0.5
    new[1, 0, 2] = 100.0  # a padding token: not counted
    table = relative_changes([ref], [new], [{"attention_mask": torch.tensor([[1, 1, 0]])}])
    assert table["max_relative_change"].tolist() == [0.0, 0.5]
    assert table["mean_relative_change"].tolist() == [0.0, 0.25]


def test_pooled_cosines_known_answer():
    ref = torch.zeros(2, 1, 3, 2)  # [layers + 1, batch, tokens, dim]
    ref[-1, 0, 0] = torch.tensor([1.0, 0.0])
    ref[-1, 0, 1] = torch.tensor([1.0, 0.0])
    new = ref.clone()
    new[-1, 0, 1] = torch.tensor([0.0, 2.0])  # pooled (0.5, 1) vs (1, 0)
    new[-1, 0, 2] = torch.tensor([-9.0, 0.0])  # padding: not pooled
    cos = pooled_cosines([ref], [new], [{"attention_mask": torch.tensor([[1, 1, 0]])}])
    torch.testing.assert_close(cos, torch.tensor([0.5 / math.sqrt(1.25)]))


def test_theoretical_packed_size_known_answer():
    model = tiny_bert(mlm=True, layers=1, hidden=32)
    linears = {id(model.get_submodule(n).weight) for n in encoder_linear_names(model)}
    params = {id(p): p for p in model.parameters()}.values()
    other = sum(p.numel() for p in params if id(p) not in linears)
    # one layer: q, k, v, attention out 32x32; intermediate 64x32; output 32x64
    weights, channels = 4 * 32 * 32 + 2 * 64 * 32, 4 * 32 + 64 + 32
    assert theoretical_packed_bytes(model, 4) == weights // 2 + 4 * channels + 4 * other
    assert theoretical_packed_bytes(model, 3) == math.ceil(weights * 3 / 8) + 4 * channels + 4 * other
    groups = 4 * 32 * 2 + 64 * 2 + 32 * 4  # group size 16
    assert theoretical_packed_bytes(model, 2, 16) == weights // 4 + 4 * groups + 4 * other


def test_dynamic_int8_is_close_to_float32_and_smaller():
    engine, reason = int8_engine()
    if engine is None:
        pytest.skip(f"no int8 engine: {reason}")
    model = tiny_bert(mlm=True, hidden=64)
    quantized, note = dynamic_int8(model)
    assert quantized is not None, note
    assert "real int8" in note and engine in note
    names = encoder_linear_names(model)
    assert all(type(quantized.get_submodule(n)).__module__.startswith("torch.ao.nn.quantized.dynamic") for n in names)
    assert type(quantized.cls.predictions.transform.dense) is nn.Linear  # the MLM head stays float32
    assert type(model.get_submodule(names[0])) is nn.Linear  # the original is untouched
    batches = inputs_only(pair_batches(2))
    change = relative_changes(hidden_states(model, batches), hidden_states(quantized, batches), batches)
    assert 0 < change["max_relative_change"].max() < 0.02
    assert serialized_bytes(quantized) < 0.6 * serialized_bytes(model)
    per_channel, note = dynamic_int8(model, per_channel=True)
    assert "per-channel" in note
    packed = per_channel.get_submodule(names[0]).weight()  # the int8 weight, as torch holds it
    assert packed.qscheme() == torch.per_channel_affine and packed.q_per_channel_scales().shape == (64,)
    change = relative_changes(hidden_states(model, batches), hidden_states(per_channel, batches), batches)
    assert 0 < change["max_relative_change"].max() < 0.02


def test_forward_seconds_times_each_model_in_turns():
    models = [tiny_bert(), tiny_bert(seed=1)]
    timings = forward_seconds(models, inputs_only(pair_batches(1)), repeat=2)
    assert len(timings) == 2 and all(wall > 0 and cpu >= 0 for wall, cpu in timings)


def test_compare_quantization_table():
    model = tiny_bert(mlm=True, hidden=64)
    mlm_batches = pair_batches(2)
    settings = (
        QuantSetting("float32"),
        QuantSetting("int8-dynamic"),
        QuantSetting("simulated", 8),
        QuantSetting("simulated", 2),
    )
    summary, layers = compare_quantization(
        model, inputs_only(mlm_batches), settings=settings, mlm_batches=mlm_batches, repeat=1
    )
    rows = summary.set_index("setting")
    assert list(rows.index) == ["float32", "int8-dynamic", "simulated-8bit", "simulated-2bit"]
    assert rows.loc["float32", "max_relative_change"] == 0 and rows.loc["float32", "speedup"] == 1
    assert rows.loc["float32", "size_ratio"] == 1 and rows.loc["float32", "pooled_cosine"] == pytest.approx(1)
    assert rows.loc["simulated-2bit", "pooled_cosine"] < rows.loc["simulated-8bit", "pooled_cosine"] <= 1 + 1e-6
    assert rows.loc["simulated-8bit", "size_kind"] == "theoretical" and math.isnan(
        rows.loc["simulated-8bit", "speedup"]
    )
    assert rows.loc["simulated-2bit", "note"] == qz.SIMULATED_NOTE and not rows.loc["simulated-2bit", "real_kernels"]
    assert rows.loc["simulated-2bit", "size_ratio"] < rows.loc["simulated-8bit", "size_ratio"] < 1
    assert rows.loc["simulated-8bit", "mlm_loss"] == pytest.approx(rows.loc["float32", "mlm_loss"], rel=1e-3)
    assert rows.loc["simulated-2bit", "max_relative_change"] > 10 * rows.loc["simulated-8bit", "max_relative_change"]
    if int8_engine()[0] is not None:
        assert rows.loc["int8-dynamic", "size_kind"] == "serialized" and rows.loc["int8-dynamic", "size_ratio"] < 1
        assert rows.loc["int8-dynamic", "speedup"] > 0
    assert (summary["seconds"] > 0).all() and (summary["cpu_seconds"] >= 0).all()
    assert set(layers["setting"]) == set(rows.index) and len(layers) == 4 * 3  # 2 layers + embeddings
    # a base model has no MLM head: no MLM loss
    base, _ = compare_quantization(tiny_bert(), inputs_only(mlm_batches)[:1], settings=settings[:1], repeat=1)
    assert math.isnan(base.loc[0, "mlm_loss"])


def test_missing_int8_engine_gives_a_row_that_says_why(monkeypatch):
    monkeypatch.setattr(qz, "int8_engine", lambda: (None, "torch was built without a quantized engine"))
    model = tiny_bert(mlm=True)
    assert dynamic_int8(model) == (None, "torch was built without a quantized engine")
    summary, layers = compare_quantization(
        model, inputs_only(pair_batches(1)), settings=(QuantSetting("float32"), QuantSetting("int8-dynamic")), repeat=1
    )
    row = summary.set_index("setting").loc["int8-dynamic"]
    assert row["note"] == "torch was built without a quantized engine"
    assert math.isnan(row["size_bytes"]) and math.isnan(row["speedup"]) and math.isnan(row["seconds"])
    assert summary.set_index("setting").loc["float32", "speedup"] == 1
    assert set(layers["setting"]) == {"float32"}


@pytest.mark.real_model
@pytest.mark.slow
def test_probing_per_layer_under_quantization_is_paired_with_float32(tmp_path):
    """MiniLM on 40 Brown sentences, a linear POS probe per layer: float32 differs from itself by
    exactly 0 at every layer; simulated 8-bit weights move no layer's accuracy by more than 3
    points; every estimate lies in its interval; the probe sees the same sentences each time."""
    from bertology.corpus import load_corpus
    from bertology.models import load_model
    from bertology.probes.compression import quantized_probing

    lm = load_model("minilm-l6", attentions=False)
    corpus = load_corpus("brown-sample", limit=40)
    table = quantized_probing(
        lm, corpus, settings=[QuantSetting("float32"), QuantSetting("simulated", 8)], root=tmp_path
    )
    assert sorted(set(table["setting"])) == ["float32", "simulated-8bit"]
    reference = table[table["setting"] == "float32"]
    assert len(reference) == lm.config.num_hidden_layers + 1 and (reference["difference"] == 0).all()
    eight = table[table["setting"] == "simulated-8bit"]
    assert (eight["difference"].abs() <= 0.03).all(), eight
    assert ((table["low"] <= table["accuracy"]) & (table["accuracy"] <= table["high"])).all()
    assert eight["n_test_items"].tolist() == reference["n_test_items"].tolist()
    assert (reference["accuracy"] > 0.5).all()
