"""Process settings for long CPU jobs."""

import sys

import pytest
import torch

from bertology.runtime import keep_freed_memory


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_keep_freed_memory_keeps_freed_blocks_and_leaves_results_alone():
    x = torch.arange(1000.0)
    expected = float(x.sum())
    assert keep_freed_memory() is True
    assert keep_freed_memory() is True          # idempotent
    big = torch.ones(50_000_000)                # 200 MB, far above glibc's default mmap threshold
    big.add_(1.0)                               # touch every page
    held = _rss_bytes()
    del big
    after_free = _rss_bytes()
    # glibc now serves large blocks from its heap and keeps them when freed: the pages stay resident
    # (with the default settings the 200 MB would go back to the kernel at once)
    assert held - after_free < 50_000_000, (held, after_free)
    assert float(torch.arange(1000.0).sum()) == expected
