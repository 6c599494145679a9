"""How long each request's prompt and output are: fixed values, bounded distributions, or a shipped joint histogram.

A `LengthModel` draws a (prompt tokens, output tokens) pair per request from its own seeded random stream, so the
lengths are reproducible and independent of the arrival times. Distributions are given as short specs on the command
line (`fixed:128`, `uniform:64:512`, `normal:MEAN:SD[:MIN:MAX]`, `lognormal:MEDIAN:SIGMA[:MIN:MAX]`) and are always
bounded (default bounds 1 and 131,072 tokens; a draw outside them is clipped). A histogram (`histogram:NAME` for a
file shipped in `data/`, or `histogram:PATH`) is joint: it keeps the correlation between prompt and output lengths
that sampling the two independently would lose (long prompts with short answers, in the Azure code trace). Its rows
are `prompt_min,prompt_max,output_min,output_max,count` (inclusive integer ranges); a draw picks a row in proportion
to its count, then a length uniformly within each range. `joint_histogram` builds such rows from recorded pairs;
the shipped files were made with it (data/README.md says from what).
"""

from __future__ import annotations

import bisect
import csv
import itertools
import math
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

DATA: Final = Path(__file__).resolve().parent / "data"
MIN_TOKENS: Final = 1
MAX_TOKENS: Final = 131072
"""Default upper bound of a drawn length: Llama-3.1's context window."""
EDGES: Final[tuple[int, ...]] = (
    1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288,
    16384, 24576, 32768, 65536, 131072,
)  # fmt: skip
"""Bin edges of `joint_histogram`: powers of two, then half-octaves from 32 tokens on."""


class Distribution(Protocol):
    """One length, drawn from `rng`."""

    def draw(self, rng: random.Random) -> int: ...

    def describe(self) -> str: ...


def _bounded(value: float, low: int, high: int) -> int:
    return min(high, max(low, round(value)))


def _check_bounds(low: int, high: int) -> None:
    if not MIN_TOKENS <= low <= high:
        raise ValueError(f"length bounds must satisfy {MIN_TOKENS} <= min <= max, not {low}..{high}")


@dataclass(frozen=True)
class Fixed:
    tokens: int

    def __post_init__(self) -> None:
        _check_bounds(self.tokens, self.tokens)

    def draw(self, rng: random.Random) -> int:
        return self.tokens

    def describe(self) -> str:
        return f"fixed {self.tokens}"


@dataclass(frozen=True)
class Uniform:
    """An integer uniformly within [low, high]."""

    low: int
    high: int

    def __post_init__(self) -> None:
        _check_bounds(self.low, self.high)

    def draw(self, rng: random.Random) -> int:
        return rng.randint(self.low, self.high)

    def describe(self) -> str:
        return f"uniform {self.low}..{self.high}"


@dataclass(frozen=True)
class Normal:
    """round(N(mean, sd)), clipped to [low, high]."""

    mean: float
    sd: float
    low: int = MIN_TOKENS
    high: int = MAX_TOKENS

    def __post_init__(self) -> None:
        _check_bounds(self.low, self.high)
        if self.sd < 0:
            raise ValueError("normal: the standard deviation must be >= 0")

    def draw(self, rng: random.Random) -> int:
        return _bounded(rng.gauss(self.mean, self.sd), self.low, self.high)

    def describe(self) -> str:
        return f"normal mean {self.mean:g} sd {self.sd:g} in {self.low}..{self.high}"


@dataclass(frozen=True)
class LogNormal:
    """round(median x e^(sigma Z)), clipped to [low, high]: the long right tail of real prompt and output lengths."""

    median: float
    sigma: float
    low: int = MIN_TOKENS
    high: int = MAX_TOKENS

    def __post_init__(self) -> None:
        _check_bounds(self.low, self.high)
        if self.median <= 0 or self.sigma < 0:
            raise ValueError("lognormal: the median must be > 0 and sigma >= 0")

    def draw(self, rng: random.Random) -> int:
        return _bounded(rng.lognormvariate(math.log(self.median), self.sigma), self.low, self.high)

    def describe(self) -> str:
        return f"lognormal median {self.median:g} sigma {self.sigma:g} in {self.low}..{self.high}"


def parse_distribution(spec: str) -> Distribution:
    """`fixed:N`, `uniform:MIN:MAX`, `normal:MEAN:SD[:MIN:MAX]` or `lognormal:MEDIAN:SIGMA[:MIN:MAX]`."""
    kind, _, rest = spec.partition(":")
    args = rest.split(":") if rest else []
    try:
        if kind == "fixed" and len(args) == 1:
            return Fixed(int(args[0]))
        if kind == "uniform" and len(args) == 2:
            return Uniform(int(args[0]), int(args[1]))
        if kind in ("normal", "lognormal") and len(args) in (2, 4):
            bounds = (int(args[2]), int(args[3])) if len(args) == 4 else (MIN_TOKENS, MAX_TOKENS)
            cls = Normal if kind == "normal" else LogNormal
            return cls(float(args[0]), float(args[1]), *bounds)
    except ValueError as error:
        raise ValueError(f"length {spec!r}: {error}") from error
    raise ValueError(
        f"length {spec!r}: expected fixed:N, uniform:MIN:MAX, normal:MEAN:SD[:MIN:MAX] "
        "or lognormal:MEDIAN:SIGMA[:MIN:MAX]"
    )


class LengthModel(Protocol):
    """(prompt tokens, output tokens) of the next request."""

    def draw(self, rng: random.Random) -> tuple[int, int]: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class Independent:
    """Prompt and output lengths drawn independently."""

    prompt: Distribution
    output: Distribution

    def draw(self, rng: random.Random) -> tuple[int, int]:
        return self.prompt.draw(rng), self.output.draw(rng)

    def describe(self) -> str:
        return f"prompt {self.prompt.describe()}, output {self.output.describe()}"


@dataclass(frozen=True)
class Bin:
    prompt: tuple[int, int]
    output: tuple[int, int]
    count: int


@dataclass(frozen=True)
class JointHistogram:
    """Pairs drawn from a joint histogram (see the module documentation)."""

    name: str
    bins: tuple[Bin, ...]
    cumulative: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.bins or any(b.count < 0 for b in self.bins) or sum(b.count for b in self.bins) <= 0:
            raise ValueError(f"histogram {self.name}: no bin with a positive count")
        for b in self.bins:
            _check_bounds(*b.prompt)
            _check_bounds(*b.output)
        object.__setattr__(self, "cumulative", tuple(itertools.accumulate(b.count for b in self.bins)))

    def draw(self, rng: random.Random) -> tuple[int, int]:
        cumulative = self.cumulative
        chosen = self.bins[bisect.bisect_right(cumulative, rng.randrange(cumulative[-1]))]
        return rng.randint(*chosen.prompt), rng.randint(*chosen.output)

    def mean(self) -> tuple[float, float]:
        """The expected (prompt, output) lengths of a draw."""
        total = sum(b.count for b in self.bins)
        prompt = sum(b.count * (b.prompt[0] + b.prompt[1]) / 2 for b in self.bins) / total
        output = sum(b.count * (b.output[0] + b.output[1]) / 2 for b in self.bins) / total
        return prompt, output

    def describe(self) -> str:
        return f"histogram {self.name} ({len(self.bins)} bins, {sum(b.count for b in self.bins)} samples)"


def read_histogram(spec: str) -> JointHistogram:
    """A joint histogram: a file shipped in `data/` by name (`azure-conv-2023`), or a CSV path."""
    path = Path(spec)
    shipped = DATA / f"{spec}.csv"
    if not path.is_file() and shipped.is_file():
        path = shipped
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in DATA.glob("*.csv")))
        raise ValueError(f"histogram {spec!r}: no such file, and no shipped histogram of that name ({known})")
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(line for line in handle if line.strip() and not line.startswith("#")))
    try:
        bins = tuple(
            Bin(
                (int(r["prompt_min"]), int(r["prompt_max"])),
                (int(r["output_min"]), int(r["output_max"])),
                int(r["count"]),
            )
            for r in rows
        )
    except (KeyError, ValueError, TypeError) as error:
        raise ValueError(f"{path}: rows of prompt_min,prompt_max,output_min,output_max,count: {error}") from error
    return JointHistogram(path.stem, bins)


def _bin_of(value: int, edges: Sequence[int]) -> tuple[int, int]:
    """The inclusive range [edges[i], edges[i+1] - 1] holding `value` (values past the last edge: the last bin)."""
    value = max(edges[0], min(value, edges[-1] - 1))
    index = bisect.bisect_right(edges, value) - 1
    return edges[index], edges[index + 1] - 1


def joint_histogram(pairs: Iterable[tuple[int, int]], edges: Sequence[int] = EDGES) -> list[Bin]:
    """The non-empty bins of recorded (prompt, output) pairs over `edges`, in bin order."""
    counts = Counter((_bin_of(p, edges), _bin_of(o, edges)) for p, o in pairs)
    return [Bin(prompt, output, count) for (prompt, output), count in sorted(counts.items())]


def write_histogram(bins: Sequence[Bin], path: Path, comments: Sequence[str] = ()) -> None:
    with path.open("w", newline="") as handle:
        for line in comments:
            handle.write(f"# {line}\n")
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["prompt_min", "prompt_max", "output_min", "output_max", "count"])
        for b in bins:
            writer.writerow([*b.prompt, *b.output, b.count])


def length_model(prompt: str | None, output: str | None, histogram: str | None) -> LengthModel:
    """The CLI's choice: a histogram, or independent prompt and output distributions (default fixed 128 and 32)."""
    if histogram is not None:
        if prompt is not None or output is not None:
            raise ValueError("give either a histogram or prompt/output distributions, not both")
        return read_histogram(histogram)
    return Independent(parse_distribution(prompt or "fixed:128"), parse_distribution(output or "fixed:32"))
