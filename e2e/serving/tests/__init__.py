"""Tests of serving mode: the pod runner (unit and on a private serving cluster)."""
