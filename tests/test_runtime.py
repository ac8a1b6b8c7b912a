"""Process settings for long CPU jobs."""

import sys

import pytest
import torch

from workbench.runtime import keep_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_keep_freed_memory_applies_once_and_leaves_results_alone():
    before = torch.arange(10.0).sum()
    assert keep_freed_memory() is True
    assert keep_freed_memory() is True          # idempotent
    big = torch.ones(3_000_000)                 # above glibc's default mmap threshold
    del big
    assert torch.arange(10.0).sum() == before
