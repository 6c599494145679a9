"""Tests of the SGLang worker emulator: argv parsing, honesty against the wheels, and end to end with real routers."""
