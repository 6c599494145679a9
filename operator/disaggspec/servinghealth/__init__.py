"""Runtime health of the serving pods (issue 20): is speculative decoding accepting drafts, does the KV transfer work.

`samples` reads one pod's `/metrics` text into plain numbers, `judge` turns a window of them into the verdicts behind
the `SpecDecodeHealthy` and `TransferHealthy` conditions, `prometheus` builds and parses the same signals from a
Prometheus HTTP API instead; all three are pure. `monitor` is the I/O: a thread off the reconcile path that lists
pool pods, scrapes them (or queries Prometheus), keeps verdicts in memory and requeues a service whose verdict changed.
"""
