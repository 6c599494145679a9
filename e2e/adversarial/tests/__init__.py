"""Unit tests of the adversarial corpus (no cluster)."""
