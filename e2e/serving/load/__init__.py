"""Open-loop load with an SLA report, for the serving simulation and any SGLang router on loopback (issue 31).

`python -m e2e.serving.load --url http://127.x.y.z:PORT --rate 20 --duration 60 --sla-ttft-ms 500 --sla-itl-ms 50
--out DIR` sends requests at scheduled times whatever the server does (open loop), streams every answer to time its
first token and its inter-token latency, and writes summary.json, timeline.csv, requests.csv and plot.png (see
docs/performance.md, "Open-loop load"). Modules: `arrivals` (when: Poisson at a rate, steps, a ramp, a compressed
day, a trace file), `lengths` (how long: fixed, distributions, a shipped joint histogram in `data/`), `client` (the
bounded, loopback-only streaming client), `sla` (goodput, percentiles, failures, the per-second timeline), `pools`
(ready servers per pool from the Kubernetes API), `plot` (the PNG), `timescale` (a load planned in emulated time,
sent S times slower for time-scaled emulators, reported back in emulated time), `cli` (the command). The
closed-loop client of the simulation's tests stays `e2e.serving.traffic`; this package reuses its loopback check,
targets and in-band error parsing.
"""
