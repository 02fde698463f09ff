"""Fixtures for tests that run real gRPC servers and party processes."""

from tests.support.deployment import in_thread, processes  # noqa: F401  (pytest fixtures)
