"""Arrival schedules: counts match the rate curve's integral (Poisson bounds), seeds reproduce, traces replay."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from e2e.serving.load import arrivals as arr


def _count(found: list[arr.Arrival], start: float, end: float) -> int:
    return sum(1 for a in found if start <= a.at < end)


def _within_poisson(observed: int, expected: float, sigmas: float = 4.0) -> bool:
    """Whether a Poisson count is within `sigmas` standard deviations of its mean."""
    return abs(observed - expected) <= sigmas * math.sqrt(expected)


def test_constant_rate_counts_gaps_and_seed() -> None:
    curve = arr.Constant(50.0, 200.0)
    found = arr.poisson_arrivals(curve, seed=7, limit=1_000_000)
    assert _within_poisson(len(found), 10_000)
    assert all(b.at > a.at for a, b in itertools.pairwise(found))
    gaps = [b.at - a.at for a, b in itertools.pairwise(found)]
    mean = sum(gaps) / len(gaps)
    assert abs(mean - 0.02) < 0.001  # exponential gaps of mean 1/rate
    # Exponential: the coefficient of variation is 1 (a fixed-interval schedule would give 0).
    sd = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps))
    assert 0.95 < sd / mean < 1.05
    assert found == arr.poisson_arrivals(curve, seed=7, limit=1_000_000)
    assert found != arr.poisson_arrivals(curve, seed=8, limit=1_000_000)
    assert arr.poisson_arrivals(curve, seed=7, limit=10) == found[:10]
    assert all(0 <= a.at < 200 for a in found)


def test_steps_follow_each_rate() -> None:
    curve = arr.Steps(((30.0, 10.0), (30.0, 100.0), (30.0, 0.0), (10.0, 40.0)))
    assert curve.duration == 100.0 and curve.peak() == 100.0
    found = arr.poisson_arrivals(curve, seed=1, limit=10**6)
    assert _within_poisson(_count(found, 0, 30), 300)
    assert _within_poisson(_count(found, 30, 60), 3000)
    assert _count(found, 60, 90) == 0
    assert _within_poisson(_count(found, 90, 100), 400)
    assert math.isclose(arr.mean_rate(curve), (300 + 3000 + 400) / 100, rel_tol=1e-3)


def test_ramp_is_linear() -> None:
    curve = arr.Ramp(0.0, 100.0, 100.0)
    assert curve.rate(25.0) == 25.0 and curve.rate(100.0) == 0.0
    found = arr.poisson_arrivals(curve, seed=3, limit=10**6)
    # Integral of t over [0, 50) is 1250, over [50, 100) 3750.
    assert _within_poisson(_count(found, 0, 50), 1250)
    assert _within_poisson(_count(found, 50, 100), 3750)


def test_daily_curve_compresses_a_day() -> None:
    curve = arr.Daily(peak_rate=40.0, duration=240.0, shape=arr.default_daily_shape(0.25))
    # 24 h in 240 s: an hour lasts 10 s. The default shape peaks at 14:00 and is quietest at 02:00.
    assert math.isclose(curve.rate(140.0), 40.0)
    assert math.isclose(curve.rate(20.0), 10.0)
    assert max(curve.rate(t / 10) for t in range(2400)) <= curve.peak()
    # Linear between hours, and 23:30 lies between hour 23 and hour 0 (the day wraps).
    shape = curve.shape
    assert math.isclose(curve.rate(235.0), 40.0 * (shape[23] + shape[0]) / 2 / max(shape))
    found = arr.poisson_arrivals(curve, seed=11, limit=10**6)
    hours = [_count(found, 10 * h, 10 * h + 10) for h in range(24)]
    assert hours.index(max(hours)) in range(12, 17) and hours.index(min(hours)) in (0, 1, 2, 3, 4)
    assert _within_poisson(len(found), arr.mean_rate(curve) * 240)
    # A measured day: hourly weights, scaled so that the busiest hour runs at the peak rate.
    flat_night = arr.Daily(10.0, 24.0, tuple([0.0] * 6 + [2.0] * 18))
    assert flat_night.rate(3.0) == 0.0 and flat_night.rate(12.0) == 10.0
    with pytest.raises(ValueError, match="24 finite weights"):
        arr.Daily(10.0, 24.0, (1.0,) * 23)


def test_bad_curves_are_refused() -> None:
    with pytest.raises(ValueError):
        arr.Constant(-1.0, 10.0)
    with pytest.raises(ValueError):
        arr.Ramp(1.0, 2.0, 0.0)
    with pytest.raises(ValueError):
        arr.Steps(())
    assert arr.poisson_arrivals(arr.Constant(0.0, 10.0), seed=0, limit=100) == []


def test_trace_files(tmp_path: Path) -> None:
    plain = tmp_path / "plain.csv"
    plain.write_text("timestamp,prompt_tokens,output_tokens\n12.5,100,10\n10.0,200,20\n# a comment\n\n11.0,300,30\n")
    found = arr.read_trace(plain)
    assert found == [arr.Arrival(0.0, 200, 20), arr.Arrival(1.0, 300, 30), arr.Arrival(2.5, 100, 10)]
    assert [a.at for a in arr.read_trace(plain, speedup=2.0)] == [0.0, 0.5, 1.25]
    assert len(arr.read_trace(plain, limit=2)) == 2

    # The Azure LLM inference traces' own header and timestamps (seven fraction digits).
    azure = tmp_path / "azure.csv"
    azure.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n"
    )
    found = arr.read_trace(azure)
    assert found[0] == arr.Arrival(0.0, 374, 44)
    assert math.isclose(found[1].at, 4.314579, abs_tol=1e-6) and found[1].prompt_tokens == 396

    times_only = tmp_path / "times.csv"
    times_only.write_text("at\n0.5\n0.25\n")
    assert arr.read_trace(times_only) == [arr.Arrival(0.0), arr.Arrival(0.25)]

    broken = tmp_path / "broken.csv"
    broken.write_text("when,x\n1,2\n")
    with pytest.raises(ValueError, match="no column named"):
        arr.read_trace(broken)
    broken.write_text("timestamp,prompt_tokens\n1,many\n")
    with pytest.raises(ValueError, match=r"broken\.csv:2"):
        arr.read_trace(broken)
