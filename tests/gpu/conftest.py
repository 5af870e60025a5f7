"""GPU tests: marked `gpu` and skipped where torch sees no CUDA/ROCm device (CI has none)."""

from __future__ import annotations

import pytest


def _gpu_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def pytest_collection_modifyitems(config, items):
    if _gpu_count() > 0:
        return
    skip = pytest.mark.skip(reason="no CUDA/ROCm GPU visible to torch")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
