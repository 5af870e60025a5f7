"""Robust statistics for measured samples: standard library only, no torch, no numpy.

Medians and percentiles rather than means (one slow window from a stray interrupt should not
move a verdict); MAD for robust spread (1.4826 x MAD estimates sigma for normal data).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

# Scale that makes the MAD a consistent estimator of the standard deviation for normal data.
MAD_TO_SIGMA = 1.4826


def _clean(values: Iterable[float]) -> list[float]:
    return sorted(float(v) for v in values if v is not None and not math.isnan(float(v)))


def median(values: Iterable[float]) -> float:
    """The median; NaN for no values (NaN and None samples are ignored)."""
    data = _clean(values)
    if not data:
        return math.nan
    mid = len(data) // 2
    return data[mid] if len(data) % 2 else (data[mid - 1] + data[mid]) / 2.0


def percentile(values: Iterable[float], q: float) -> float:
    """The q-th percentile (0..100), linear interpolation between closest ranks (numpy's default)."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    data = _clean(values)
    if not data:
        return math.nan
    position = (len(data) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (position - low)


def mean(values: Iterable[float]) -> float:
    data = _clean(values)
    return sum(data) / len(data) if data else math.nan


def stdev(values: Iterable[float]) -> float:
    """Sample standard deviation (n-1); 0.0 for a single value."""
    data = _clean(values)
    if not data:
        return math.nan
    if len(data) == 1:
        return 0.0
    m = sum(data) / len(data)
    return math.sqrt(sum((x - m) ** 2 for x in data) / (len(data) - 1))


def cv(values: Iterable[float]) -> float:
    """Coefficient of variation (stdev / mean) as a fraction; NaN when the mean is 0."""
    data = _clean(values)
    m = mean(data)
    if not data or m == 0 or math.isnan(m):
        return math.nan
    return stdev(data) / abs(m)


def mad(values: Iterable[float]) -> float:
    """Median absolute deviation from the median (unscaled)."""
    data = _clean(values)
    if not data:
        return math.nan
    m = median(data)
    return median(abs(x - m) for x in data)


def robust_z(value: float, values: Sequence[float]) -> float:
    """(value - median) / (1.4826 x MAD); 0.0 when the spread is zero and the value is the median."""
    m = median(values)
    spread = MAD_TO_SIGMA * mad(values)
    if spread == 0 or math.isnan(spread):
        return 0.0 if value == m else math.copysign(math.inf, value - m)
    return (value - m) / spread


def drift(values: Sequence[float], fraction: float = 0.1) -> float:
    """Median of the last `fraction` over median of the first: 1.0 = no drift (thermal soak check)."""
    data = [float(v) for v in values]
    if len(data) < 2:
        return math.nan
    k = max(1, int(len(data) * fraction))
    first, last = median(data[:k]), median(data[-k:])
    return last / first if first else math.nan


def summary(values: Iterable[float]) -> dict[str, float]:
    """n, median, mean, min, max, cv and p5/p50/p95/p99, rounded for reports."""
    data = _clean(values)
    if not data:
        return {"n": 0}
    out = {
        "n": len(data),
        "median": median(data),
        "mean": mean(data),
        "min": data[0],
        "max": data[-1],
        "cv": cv(data),
        "p5": percentile(data, 5),
        "p50": percentile(data, 50),
        "p95": percentile(data, 95),
        "p99": percentile(data, 99),
    }
    return {k: (v if k == "n" else round(v, 6)) for k, v in out.items()}
