"""Process settings for long CPU jobs."""

import json
import sys
import warnings

import pytest
import torch

from bertology import runtime
from bertology.runtime import keep_freed_memory


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_keep_freed_memory_keeps_freed_blocks_and_leaves_results_alone():
    x = torch.arange(1000.0)
    expected = float(x.sum())
    assert keep_freed_memory() is True
    assert keep_freed_memory() is True  # idempotent
    big = torch.ones(50_000_000)  # 200 MB, far above glibc's default mmap threshold
    big.add_(1.0)  # touch every page
    held = _rss_bytes()
    del big
    after_free = _rss_bytes()
    # glibc now serves large blocks from its heap and keeps them when freed: the pages stay resident
    # (with the default settings the 200 MB would go back to the kernel at once)
    assert held - after_free < 50_000_000, (held, after_free)
    assert float(torch.arange(1000.0).sum()) == expected


# --- precision ---------------------------------------------------------------------------------


@pytest.fixture
def planted_speedup(monkeypatch):
    """Replace the micro-benchmark by a planted speed-up; count how often it is measured."""
    calls = []

    def plant(value):
        def fake(dtype, device="cpu", **kw):
            calls.append((dtype, torch.device(device).type))
            return value

        monkeypatch.setattr(runtime, "measure_speedup", fake)
        monkeypatch.setattr(runtime, "_speedups", {})
        runtime._cache_file().unlink(missing_ok=True)
        return calls

    return plant


def test_auto_picks_bfloat16_only_where_measured_faster(planted_speedup):
    planted_speedup(2.0)
    assert runtime.resolve_precision("auto") is torch.bfloat16
    planted_speedup(1.1)  # faster, but by less than AUTO_MIN_SPEEDUP: not worth the digits
    assert runtime.resolve_precision("auto") is None
    planted_speedup(0.08)
    assert runtime.resolve_precision("auto") is None
    assert runtime.resolve_precision(None) is None and runtime.resolve_precision("float32") is None
    assert runtime.resolve_precision(None, default="auto") is None


def test_explicit_bfloat16_where_slower_warns_with_the_measured_cost(planted_speedup):
    planted_speedup(0.08)
    with pytest.warns(runtime.PrecisionWarning, match=r"12\.5x slower than float32") as record:
        assert runtime.resolve_precision("bfloat16", what="extraction") is torch.bfloat16
    assert "extraction on " in str(record[0].message) and runtime.cpu_info().model in str(record[0].message)
    planted_speedup(1.6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # faster: no warning
        assert runtime.resolve_precision("bfloat16") is torch.bfloat16
    with pytest.raises(ValueError, match="precision must be"):
        runtime.resolve_precision("fp8")


def test_speedup_is_measured_once_per_machine_and_torch_version(planted_speedup, monkeypatch):
    calls = planted_speedup(3.0)
    assert runtime.low_precision_speedup("bfloat16") == 3.0
    assert runtime.low_precision_speedup(torch.bfloat16) == 3.0  # this process: cached
    assert len(calls) == 1
    cache = json.loads(runtime._cache_file().read_text())
    ((key, value),) = cache.items()
    assert value == 3.0 and runtime.cpu_info().model in key and torch.__version__ in key
    monkeypatch.setattr(runtime, "_speedups", {})  # a new process: read the file
    assert runtime.low_precision_speedup("bfloat16") == 3.0 and len(calls) == 1
    monkeypatch.setattr(runtime, "_speedups", {})
    monkeypatch.setattr(torch, "__version__", "9.9.9")  # new torch: measured again
    assert runtime.low_precision_speedup("bfloat16") == 3.0 and len(calls) == 2
    assert len(json.loads(runtime._cache_file().read_text())) == 2
    runtime._cache_file().write_text("{not json")  # a corrupt cache is remade
    monkeypatch.setattr(runtime, "_speedups", {})
    assert runtime.low_precision_speedup("bfloat16") == 3.0 and len(calls) == 3
    monkeypatch.setattr(runtime, "_speedups", {})
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # kernels capped at AVX2: measured again
    assert runtime.low_precision_speedup("bfloat16") == 3.0 and len(calls) == 4
    assert any("ONEDNN_MAX_CPU_ISA=AVX2" in k for k in json.loads(runtime._cache_file().read_text()))


def test_measured_speedup_and_cpu_info_are_real_numbers():
    info = runtime.cpu_info()
    assert info.model and info.cores >= 1 and set(info.flags) <= set(runtime.MATRIX_FLAGS)
    assert info.model in info.describe() and ("no AMX" in info.describe()) != ("amx_tile" in info.flags)
    value = runtime.measure_speedup(torch.bfloat16, repeat=2)
    assert 0 < value < 1000


def test_auto_extraction_on_a_machine_without_fast_bf16_is_the_float32_store(
    planted_speedup, tiny_lm, small_corpus, tmp_path
):
    from bertology.store import extract

    corpus = small_corpus.subset(range(6))
    planted_speedup(0.5)
    exact = extract(tiny_lm, corpus, root=tmp_path, progress=False)
    auto = extract(tiny_lm, corpus, root=tmp_path, amp_dtype="auto", progress=False)
    assert auto.path == exact.path and auto.manifest["settings"]["amp_dtype"] is None
    planted_speedup(2.0)
    fast = extract(tiny_lm, corpus, root=tmp_path, amp_dtype="auto", progress=False)
    assert fast.path != exact.path and fast.manifest["settings"]["amp_dtype"] == "bfloat16"
    planted_speedup(0.5)
    with pytest.warns(runtime.PrecisionWarning):
        again = extract(tiny_lm, corpus, root=tmp_path, amp_dtype="bfloat16", progress=False)
    assert again.path == fast.path
