"""How much the planner's demand reading holds on a steady load's noise alone, and how soon it reads a step (prints).

Seeded Poisson arrivals per scrape round go through `signals.demand` as the planner reads prefill's prompt tokens:
the window of the last 60 s (`recent_seconds`), the surge test of the last 20 s (`surge_seconds`) and the forecast
over the lead, then the prefill servers the demand needs at one server's rate and utilisation, then the highest need
of the stabilization window, as `planner` keeps it for scale-down. The defaults are the published DeepSeek day of
docs/performance.md at time scale 8: 5 s rounds and a 60 s window in wall time, so 0.625 and 7.5 emulated s;
8,192-token prompts; one server 6,492 prompt tokens/s (wall) at utilisation 0.9 (the rate the planner learned in
that run's Events); a lead of 15 and a stabilization of 30 emulated s. `--surge-errors 0 --forecast-errors 1` is the
reading before the noise tests (the higher of the two means; one error off the slope). Arrivals only: a prefill
server counts a request's tokens when it finishes there, which batches make clumpier than Poisson, so the figures
are the least noise the planner sees, not the most.

    .venv/bin/python -m e2e.perf.bench_planner_noise [--surge-errors 0 --forecast-errors 1]
"""

from __future__ import annotations

import argparse
import math

from disaggspec.autoscale import signals
from e2e.serving.load.arrivals import Constant, RateCurve, Steps, poisson_arrivals

TIME_SCALE = 8.0
ROUND_SECONDS = 5.0
WINDOW_ROUNDS = 12
PROMPT_TOKENS = 8192
SERVER_TOKENS_PER_SECOND = 6492.0
UTILISATION = 0.9
LEAD_SECONDS = 15.0 * TIME_SCALE
STABILIZATION_ROUNDS = int(30.0 * TIME_SCALE / ROUND_SECONDS)


def needs(curve: RateCurve, seed: int, surge_errors: float, forecast_errors: float) -> list[int]:
    """The prefill servers each decision needs, one decision per round once a window is full; `curve` in emulated
    requests/s, its Poisson arrivals (`poisson_arrivals`, the load generator's) counted per round."""
    per_round = ROUND_SECONDS / TIME_SCALE
    rounds = int(curve.duration / per_round)
    counts = [0] * rounds
    for arrival in poisson_arrivals(curve, seed, limit=10**7):
        counts[min(int(arrival.at / per_round), rounds - 1)] += 1
    points = [(k * ROUND_SECONDS + ROUND_SECONDS / 2, n * PROMPT_TOKENS / ROUND_SECONDS) for k, n in enumerate(counts)]
    decided = []
    for k in range(WINDOW_ROUNDS, rounds + 1):
        read = signals.demand(
            points[k - WINDOW_ROUNDS : k],
            k * ROUND_SECONDS,
            60.0,
            LEAD_SECONDS,
            20.0,
            surge_errors=surge_errors,
            forecast_errors=forecast_errors,
        )
        decided.append(math.ceil(read.forecast / (SERVER_TOKENS_PER_SECOND * UTILISATION) - 1e-9))
    return decided


def stabilized(decided: list[int]) -> list[int]:
    """The highest need of each decision's stabilization window (full windows only)."""
    width = STABILIZATION_ROUNDS
    return [max(decided[k - width : k + 1]) for k in range(width, len(decided))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--surge-errors", type=float, default=signals.SURGE_ERRORS)
    parser.add_argument("--forecast-errors", type=float, default=signals.FORECAST_ERRORS)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=400, help="decisions per seed on a steady load")
    args = parser.parse_args()
    errors = (args.surge_errors, args.forecast_errors)
    print(f"surge test {errors[0]:g} errors, forecast slope less {errors[1]:g} errors; {args.seeds} seeds")
    for rate in (30.0, 20.0, 10.0):
        each, held = [], []
        for seed in range(args.seeds):
            seconds = (args.rounds + WINDOW_ROUNDS) * ROUND_SECONDS / TIME_SCALE
            decided = needs(Constant(rate, seconds), seed, *errors)
            each += decided
            held += stabilized(decided)
        ideal = math.ceil(rate * PROMPT_TOKENS / TIME_SCALE / (SERVER_TOKENS_PER_SECOND * UTILISATION) - 1e-9)
        print(
            f"steady {rate:g} req/s: the load needs {ideal}; a decision asks {sum(each) / len(each):.2f} on average; "
            f"the stabilization holds {sum(held) / len(held):.2f} on average, at most {max(held)}"
        )
    step_at = 100
    delays = []
    for seed in range(args.seeds):
        per_round = ROUND_SECONDS / TIME_SCALE
        decided = needs(Steps(((step_at * per_round, 11.0), (30 * per_round, 33.0))), seed, *errors)
        first = next(k for k in range(step_at - WINDOW_ROUNDS + 1, len(decided)) if decided[k] >= 6)
        delays.append(first + WINDOW_ROUNDS - 1 - step_at)
    print(f"a 3x step, 11 -> 33 req/s: 6 servers asked after {sorted(delays)} rounds (each seed)")


if __name__ == "__main__":
    main()
