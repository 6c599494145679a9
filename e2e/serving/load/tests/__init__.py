"""Tests of the open-loop load generator: arrivals, lengths, the SLA maths, and runs against the emulator."""
