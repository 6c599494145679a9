"""The kind-gpu end-to-end backend: real GPUs in a kind cluster, the chart's operator, real SGLang servers.

`run.sh` creates the cluster (NVIDIA container toolkit + device plugin), builds and loads the images, installs the
chart and runs `e2e/tests/test_serving_gpu.py`. The Python modules here are the pure parts that suite needs and that
CI tests without a GPU: `manifest` renders the kind config, the DisaggSpecService and the colocated reference server;
`metrics` parses SGLang's Prometheus exposition and knows which metric each pinned release exports; `compare` turns
outputs and accept lengths into verdicts with readable messages; `portforward` reads kubectl's port-forward banner.
"""
