"""The run on one PNG (matplotlib, Agg: no display): load, latency, and ready servers per pool, second by second.

Top: requests per second offered, completed, meeting the SLA and failed, with the requests in flight on a second
axis. Middle: TTFT and ITL p50/p99 per second (log scale) with the SLA targets as dashed lines. Bottom, when pool
samples were taken: ready servers per pool. The rows are `sla.timeline`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from e2e.serving.load.sla import Sla


def _series(rows: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    return [float("nan") if row.get(key) is None else float(row[key]) for row in rows]


def plot(rows: Sequence[Mapping[str, Any]], sla: Sla, path: Path, title: str = "", time_scale: float = 1.0) -> None:
    """Draw `rows` into `path`; with `time_scale` != 1 the seconds are emulated ones (the axis says so)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pools = sorted(key for key in (rows[0] if rows else {}) if key.startswith("ready_"))
    panels = 3 if pools else 2
    figure, axes = plt.subplots(panels, 1, sharex=True, figsize=(11, 3.2 * panels), constrained_layout=True)
    seconds = [row["second"] + 0.5 for row in rows]

    load = axes[0]
    for key, style in (("offered", "k--"), ("completed", "C0-"), ("met_sla", "C2-"), ("failed", "C3-")):
        load.plot(seconds, _series(rows, key), style, label=key.replace("_", " "), linewidth=1.2)
    load.set_ylabel("requests / s")
    flight = load.twinx()
    flight.fill_between(seconds, _series(rows, "in_flight"), step="mid", color="C7", alpha=0.2, label="in flight")
    flight.set_ylabel("in flight")
    handles = load.get_legend_handles_labels()
    extra = flight.get_legend_handles_labels()
    load.legend(handles[0] + extra[0], handles[1] + extra[1], loc="best", fontsize="small", ncol=5, framealpha=0.7)
    if title:
        load.set_title(title, fontsize="medium")

    latency = axes[1]
    drawn = False
    for key, style in (("ttft_p50_ms", "C0-"), ("ttft_p99_ms", "C0:"), ("itl_p50_ms", "C1-"), ("itl_p99_ms", "C1:")):
        values = _series(rows, key)
        if any(v == v and v > 0 for v in values):  # NaN != NaN: a column with no measurement is not drawn
            latency.plot(seconds, values, style, label=key.removesuffix("_ms").replace("_", " "), linewidth=1.2)
            drawn = True
    for target, color, name in ((sla.ttft_ms, "C0", "TTFT SLA"), (sla.itl_ms, "C1", "ITL SLA")):
        if target is not None:
            latency.axhline(target, color=color, linestyle="--", linewidth=0.8, label=name)
            drawn = True
    if drawn:
        latency.set_yscale("log")
        latency.legend(loc="best", fontsize="small", ncol=6, framealpha=0.7)
    latency.set_ylabel("ms")

    if pools:
        ready = axes[2]
        for key in pools:
            ready.step(seconds, _series(rows, key), where="mid", label=key.removeprefix("ready_"), linewidth=1.5)
        ready.set_ylabel("ready servers")
        ready.legend(loc="best", fontsize="small", ncol=len(pools), framealpha=0.7)
        ready.set_ylim(bottom=0)
    scaled = f"emulated seconds since the start (sent {time_scale:g}x slower)" if time_scale != 1 else ""
    axes[-1].set_xlabel(scaled or "seconds since the start")
    figure.savefig(path, dpi=110)
    plt.close(figure)
