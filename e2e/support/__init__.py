"""The helpers shared by the test suites (e2e/tests, the suites' own tests, operator/tests/integration), the demo and
the benchmark: a handle on a cluster and the polling loop (kube), the pytest fixtures, private clusters and the
built-binaries skip marker (fixtures), the fakes of the suites that need no cluster (fakes), the checks on what the
operator created (workloads), the operator as a local process (operator_process) and as the Helm chart installs it
(operator_install), the serving simulation around a test (serving), a serving suite's whole plane (planes) and what a
rollout test watches (rollout)."""
