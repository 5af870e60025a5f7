"""The one statistics module of r9700ctl: the agent, its kernels and the controller's fleet judge.

Built on the standard library's `statistics`; no numpy, no torch. One set of conventions:
- NaN and None samples are ignored; no usable sample gives NaN (never an exception, never 0);
- percentiles take q on the 0..100 scale and interpolate linearly between closest ranks
  (numpy's default, `statistics.quantiles(method="inclusive")`);
- stdev is the SAMPLE standard deviation (n - 1): windows and repeats are samples of the card's
  behaviour, not the whole population; one value has a stdev of 0.0;
- robust z is (value - median) / (1.4826 x MAD) and None when the MAD is 0: without spread there
  is nothing to measure a distance against, so no verdict (fleet.py says so once).
Medians rather than means for figures: one slow window from a stray interrupt must not move a
verdict.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

# Scale that makes the MAD a consistent estimator of the standard deviation for normal data.
MAD_TO_SIGMA = 1.4826


def clean(values: Iterable[float | None]) -> list[float]:
    """The usable samples as floats, sorted (NaN and None dropped)."""
    out = []
    for value in values:
        if value is None:
            continue
        number = float(value)
        if not math.isnan(number):
            out.append(number)
    return sorted(out)


def median(values: Iterable[float | None]) -> float:
    """The median; NaN for no usable values."""
    data = clean(values)
    return float(statistics.median(data)) if data else math.nan


def percentile(values: Iterable[float | None], q: float) -> float:
    """The q-th percentile, q in 0..100, linear between closest ranks; NaN for no usable values."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    data = clean(values)
    if not data:
        return math.nan
    position = (len(data) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (position - low)


def mean(values: Iterable[float | None]) -> float:
    data = clean(values)
    return statistics.fmean(data) if data else math.nan


def stdev(values: Iterable[float | None]) -> float:
    """Sample standard deviation (n - 1); 0.0 for a single value, NaN for none."""
    data = clean(values)
    if not data:
        return math.nan
    return statistics.stdev(data) if len(data) > 1 else 0.0


def cv(values: Iterable[float | None]) -> float:
    """Coefficient of variation: sample stdev / |mean|; NaN without values or with a zero mean."""
    data = clean(values)
    average = mean(data)
    if not data or average == 0 or math.isnan(average):
        return math.nan
    return stdev(data) / abs(average)


def mad(values: Iterable[float | None]) -> float:
    """Median absolute deviation from the median (unscaled); NaN for no values."""
    data = clean(values)
    if not data:
        return math.nan
    middle = statistics.median(data)
    return float(statistics.median(abs(x - middle) for x in data))


def robust_z(value: float, values: Iterable[float | None]) -> float | None:
    """(value - median) / (1.4826 x MAD); None when there is no spread (MAD 0) or no values."""
    spread = MAD_TO_SIGMA * mad(values)
    if spread == 0 or math.isnan(spread):
        return None
    return (value - median(values)) / spread


def drift(values: Sequence[float], fraction: float = 0.1) -> float:
    """Median of the last `fraction` over the median of the first: 1.0 = no drift (thermal soak)."""
    data = [float(v) for v in values]
    if len(data) < 2:
        return math.nan
    k = max(1, int(len(data) * fraction))
    first, last = median(data[:k]), median(data[-k:])
    return last / first if first else math.nan


def slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Least-squares slope of ys over xs (statistics.linear_regression); None when undefined
    (fewer than two points, or every x the same)."""
    try:
        return statistics.linear_regression(list(xs), list(ys)).slope
    except (statistics.StatisticsError, ValueError):
        return None


def longest_run(flags: Iterable[bool]) -> int:
    """Length of the longest run of consecutive True values."""
    best = current = 0
    for flag in flags:
        current = current + 1 if flag else 0
        best = max(best, current)
    return best


def summary(values: Iterable[float | None]) -> dict[str, float]:
    """n, median, mean, min, max, cv and p5/p50/p95/p99, rounded for reports."""
    data = clean(values)
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


def max_window_mean(points: Sequence[tuple[float, float]], window_s: float) -> float:
    """The highest mean of the values over any window of `window_s` seconds, points (t, value)
    in time order; the mean of all when they span less than the window; NaN for none.

    "Sustained" power: a PSU's over-power protection answers a load held for seconds, not one
    0.1 s reading (that is the peak).
    """
    data = [(float(t), float(v)) for t, v in points if v is not None and not math.isnan(float(v))]
    if not data:
        return math.nan
    if data[-1][0] - data[0][0] < window_s:
        return statistics.fmean(v for _, v in data)
    best, total, start = -math.inf, 0.0, 0
    for end, (t_end, value) in enumerate(data):
        total += value
        while data[start][0] < t_end - window_s:
            total -= data[start][1]
            start += 1
        if t_end - data[0][0] >= window_s:
            best = max(best, total / (end - start + 1))
    return best
