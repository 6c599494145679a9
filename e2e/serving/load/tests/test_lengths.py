"""Length distributions: bounds hold, parameters show in the samples, specs parse, histograms keep their joint shape."""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import pytest

from e2e.serving.load import lengths as ln


def _draws(dist: ln.Distribution, n: int = 20_000, seed: int = 5) -> list[int]:
    rng = random.Random(seed)
    return [dist.draw(rng) for _ in range(n)]


def test_parametric_distributions() -> None:
    assert set(_draws(ln.Fixed(128), 100)) == {128}

    uniform = _draws(ln.Uniform(64, 512))
    assert min(uniform) == 64 and max(uniform) == 512
    assert abs(statistics.mean(uniform) - 288) < 5

    normal = _draws(ln.Normal(256, 64, 200, 400))
    assert min(normal) == 200 and max(normal) <= 400  # clipped below: many draws land on the bound
    unclipped = _draws(ln.Normal(1000, 50))
    assert abs(statistics.mean(unclipped) - 1000) < 2 and abs(statistics.stdev(unclipped) - 50) < 2

    lognormal = _draws(ln.LogNormal(500, 1.0, 1, 8192))
    assert abs(statistics.median(lognormal) - 500) < 25  # the median is the parameter
    assert statistics.mean(lognormal) > 700  # the right tail pulls the mean up (e^(sigma^2/2) = 1.65 unclipped)
    assert min(lognormal) >= 1 and max(lognormal) <= 8192


def test_specs() -> None:
    assert ln.parse_distribution("fixed:7") == ln.Fixed(7)
    assert ln.parse_distribution("uniform:1:9") == ln.Uniform(1, 9)
    assert ln.parse_distribution("normal:100:10") == ln.Normal(100.0, 10.0, ln.MIN_TOKENS, ln.MAX_TOKENS)
    assert ln.parse_distribution("lognormal:300:0.8:16:4096") == ln.LogNormal(300.0, 0.8, 16, 4096)
    for bad in ("fixed", "fixed:0", "uniform:9:1", "normal:1", "lognormal:-1:1", "zipf:1", "fixed:x"):
        with pytest.raises(ValueError):
            ln.parse_distribution(bad)
    model = ln.length_model("fixed:10", None, None)
    assert model.draw(random.Random(0)) == (10, 32)
    with pytest.raises(ValueError, match="not both"):
        ln.length_model("fixed:10", None, "azure-conv-2023")


def test_joint_histogram_round_trip(tmp_path: Path) -> None:
    # Two clusters: short prompts with long outputs, long prompts with short outputs.
    pairs = [(10, 900)] * 300 + [(3000, 5)] * 100
    bins = ln.joint_histogram(pairs)
    assert bins == [ln.Bin((8, 15), (768, 1023), 300), ln.Bin((2048, 3071), (4, 7), 100)]
    path = tmp_path / "h.csv"
    ln.write_histogram(bins, path, ["made in a test"])
    assert path.read_text().startswith("# made in a test\nprompt_min,prompt_max,output_min,output_max,count\n")
    histogram = ln.read_histogram(str(path))
    rng = random.Random(1)
    draws = [histogram.draw(rng) for _ in range(8000)]
    short_prompt = [d for d in draws if d[0] < 16]
    # The correlation survives: every short prompt has a long output and the reverse, in the recorded 3:1 ratio.
    assert all(768 <= out <= 1023 for _, out in short_prompt)
    assert all(2048 <= p <= 3071 and 4 <= out <= 7 for p, out in draws if p >= 16)
    assert abs(len(short_prompt) / len(draws) - 0.75) < 0.02
    # Values past the last edge fall in the last bin.
    assert ln.joint_histogram([(10**6, 1)]) == [ln.Bin((65536, 131071), (1, 1), 1)]


@pytest.mark.parametrize(
    ("name", "requests", "trace_means"),
    # The means of ContextTokens and GeneratedTokens in the Azure 2023 traces (data/README.md).
    [("azure-conv-2023", 19366, (1154.7, 211.1)), ("azure-code-2023", 8819, (2047.8, 27.9))],
)
def test_shipped_histograms(name: str, requests: int, trace_means: tuple[float, float]) -> None:
    histogram = ln.read_histogram(name)
    assert sum(b.count for b in histogram.bins) == requests
    mean_prompt, mean_output = histogram.mean()
    # Uniform draws within a bin put the mean a few percent above the trace's.
    assert 1.0 <= mean_prompt / trace_means[0] < 1.06 and 1.0 <= mean_output / trace_means[1] < 1.06
    rng = random.Random(2)
    draws = [histogram.draw(rng) for _ in range(20_000)]
    assert abs(statistics.mean(p for p, _ in draws) / mean_prompt - 1) < 0.03
    with pytest.raises(ValueError, match="no shipped histogram"):
        ln.read_histogram("sharegpt-made-up")
