"""disaggspec: a Kubernetes operator for prefill/decode disaggregated SGLang serving with EAGLE speculative decoding."""

__version__ = "0.1.0"
