"""Imports every protocol module so that each registers its plugin."""

from smcdp.protocols import power_iteration  # noqa: F401
