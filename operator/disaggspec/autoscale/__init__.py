"""The operator's built-in SLA planner: the replicas of a service's prefill and decode pools (pure, no I/O, no clock).

`signals` reduces one pool's window of scrapes (`servinghealth.samples.PodSample` per pod and time) to rates, gauge
sums and trends; `capacity` learns what one server sustains from the service's own traffic; `pools` turns both into
what each pool needs; `planner.decide` applies the forecast, the stabilization window, the limits and the
prefill/decode band and returns a `Decision` per window with the `PlannerState` the caller keeps (and persists in the
service's status) for the next one. `contract` holds those data types (`planner` re-exports them).
"""
