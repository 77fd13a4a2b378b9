"""The statistics of `evaluate`: per reward, the mean over prompts of each prompt's mean with a 95 %
confidence interval (Student's t over prompts), the paired difference adapter - base with its interval, pass@1
where the reward is a 0/1 correctness, and the one-line verdict."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence


@dataclasses.dataclass(frozen=True)
class Summary:
    """One reward, one model: over prompts (each prompt's mean over its completions)."""

    mean: float
    low: float  # 95 % confidence interval
    high: float
    prompts: int


def confidence(values: Sequence[float]) -> Summary:
    """Mean and 95 % Student-t interval of per-prompt values."""
    from scipy import stats

    n = len(values)
    mean = statistics.fmean(values) if n else math.nan
    if n < 2:
        return Summary(mean, mean, mean, n)
    half = stats.t.ppf(0.975, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return Summary(mean, mean - half, mean + half, n)


def summarize(
    base: Mapping[str, list[list[float]]], tuned: Mapping[str, list[list[float]]]
) -> dict[str, dict]:
    """Per reward: base, adapter and the paired difference (each a Summary), and pass@1 where 0/1."""
    result = {}
    for name in base:
        b = [statistics.fmean(v) for v in base[name]]
        t = [statistics.fmean(v) for v in tuned[name]]
        binary = all(x in (0.0, 1.0) for group in (*base[name], *tuned[name]) for x in group)
        result[name] = {
            "base": dataclasses.asdict(confidence(b)),
            "adapter": dataclasses.asdict(confidence(t)),
            "difference": dataclasses.asdict(confidence([y - x for x, y in zip(b, t, strict=True)])),
            "pass_at_1": {"base": statistics.fmean(b), "adapter": statistics.fmean(t)} if binary else None,
        }
    return result


def verdict(summary: Mapping[str, dict]) -> str:
    """One line per reward: base -> adapter, and whether the difference's interval excludes 0."""
    parts = []
    for name, s in summary.items():
        d = s["difference"]
        sign = "better" if d["low"] > 0 else "worse" if d["high"] < 0 else "no clear change"
        parts.append(
            f"{name} {s['base']['mean']:.3f} -> {s['adapter']['mean']:.3f} ({sign}: {d['mean']:+.3f}, 95% CI "
            f"{d['low']:+.3f}..{d['high']:+.3f})"
        )
    return "; ".join(parts)
