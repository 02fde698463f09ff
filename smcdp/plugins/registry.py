"""Imports every protocol module so that each registers its plugin."""

from smcdp.protocols import (
    dp_aggregate,  # noqa: F401
    keyword,  # noqa: F401
    power_iteration,  # noqa: F401
)
