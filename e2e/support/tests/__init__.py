"""Tests of the shared test helpers that need no cluster (the rollout watchers' pure parts)."""
