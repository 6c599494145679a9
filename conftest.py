"""Root pytest configuration: registers the shared cluster fixtures for every suite in the repository."""

pytest_plugins = ["e2e.support.fixtures"]
