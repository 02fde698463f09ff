"""Fixtures for the CLI tests, some of which start real parties."""

from tests.support.deployment import in_thread, processes  # noqa: F401  (pytest fixtures)
