"""The helpers shared by the test suites (e2e/tests, operator/tests/integration), the demo and the benchmark: a
handle on a cluster (kube), the pytest fixtures (fixtures), the checks on what the operator created (workloads), the
operator as a local process (operator_process) and as the Helm chart installs it (operator_install), the serving
simulation around a test (serving) and what a rollout test watches (rollout)."""
