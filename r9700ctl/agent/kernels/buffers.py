"""Test data for the kernels: random contents, poisoned destinations, exact checksums.

A copy is verified by comparing checksums of source and destination after the timed loop;
the destination is poisoned first, so a copy that never happened cannot pass. Random data,
never zeros: zeros hide unwritten outputs and can run faster than real data (METHOD.md).
"""

from __future__ import annotations

import torch

POISON = -1  # every int32 word of a poisoned buffer; random data almost never sums the same


def random_int32(count: int, device: torch.device, seed: int = 1234) -> torch.Tensor:
    """`count` random int32 words on `device` (generated there: no host round trip)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return torch.randint(-(2**31), 2**31 - 1, (count,), dtype=torch.int32, device=device, generator=gen)


def poison(tensor: torch.Tensor) -> None:
    tensor.fill_(POISON)


def checksum(tensor: torch.Tensor) -> int:
    """Exact sum of the buffer's int32 words (int64 accumulator cannot overflow below 2**32 words)."""
    return int(tensor.view(torch.int32).sum(dtype=torch.int64).item())


def compared(target: torch.Tensor, expected: int) -> dict[str, bool | int]:
    """A verified copy's verdict: whether `target` now sums to the source's checksum, and both sums."""
    got = checksum(target)
    return {"ok": got == expected, "expected_checksum": expected, "got_checksum": got}


def words(nbytes: int) -> int:
    """Number of int32 words in a buffer of `nbytes` (rounded down to whole words)."""
    if nbytes < 4:
        raise ValueError(f"buffer of {nbytes} bytes is smaller than one 4-byte word")
    return nbytes // 4
