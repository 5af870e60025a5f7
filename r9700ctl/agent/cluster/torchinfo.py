"""Phase 1 in the runtime that will run the collectives: torch, its GPU backend, RCCL/NCCL, GPUs.

Run with the python the later phases use (the provisioned ROCm image through r9700-run, or the
host's), so the versions judged are the ones the job gets. Prints one JSON document; torch missing
is a fact ("torch": null), not a crash.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def gather() -> dict[str, Any]:
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        return {"torch": None, "error": f"cannot import torch: {exc}"}
    found: dict[str, Any] = {
        "torch": torch.__version__,
        "hip": getattr(torch.version, "hip", None),
        "cuda": getattr(torch.version, "cuda", None),
        "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "gloo": dist.is_available() and dist.is_gloo_available(),
        "nccl_backend": dist.is_available() and dist.is_nccl_available(),
        "nccl": None,
        "python": sys.version.split()[0],
    }
    try:
        version = torch.cuda.nccl.version()
        found["nccl"] = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
    except Exception:  # a CPU build has no NCCL/RCCL
        pass
    return found


if __name__ == "__main__":
    print(json.dumps(gather()))
