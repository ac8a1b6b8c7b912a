"""Compression of an encoder, measured against float32 in the same process.

:mod:`bertology.probes.compression.quantization`: post-training quantization of the encoder's Linear
layers -- real dynamic int8 with torch's kernels, and simulated 8/4/3/2-bit weights (quantize-
dequantized to float32, no speed-up) -- with size, MLM loss, per-layer hidden-state change, sentence
vector cosine and CPU forward time (:func:`compare_quantization`); a fine-tuned classifier's test
accuracy under each setting, paired with float32 on the same examples (:func:`task_quantization`);
a linear probe's accuracy per layer under each setting, paired with float32 (:func:`quantized_probing`)."""

from bertology.probes.compression.quantization import (
    DEFAULT_SETTINGS,
    SIMULATED_BITS,
    SIMULATED_NOTE,
    QuantSetting,
    compare_quantization,
    dynamic_int8,
    encode_sentences,
    encoder_linear_names,
    fake_quantize_weight,
    forward_seconds,
    hidden_states,
    int8_engine,
    pooled_cosines,
    quantized_model,
    quantized_probing,
    relative_changes,
    serialized_bytes,
    setting_size,
    simulate_weight_quantization,
    task_quantization,
    theoretical_packed_bytes,
)

__all__ = [
    "QuantSetting",
    "DEFAULT_SETTINGS",
    "SIMULATED_BITS",
    "SIMULATED_NOTE",
    "encoder_linear_names",
    "fake_quantize_weight",
    "simulate_weight_quantization",
    "theoretical_packed_bytes",
    "int8_engine",
    "dynamic_int8",
    "serialized_bytes",
    "encode_sentences",
    "hidden_states",
    "relative_changes",
    "pooled_cosines",
    "forward_seconds",
    "quantized_model",
    "setting_size",
    "compare_quantization",
    "task_quantization",
    "quantized_probing",
]
