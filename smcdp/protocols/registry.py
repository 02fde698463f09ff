"""Imports every protocol module so that each registers its plugin."""

from smcdp.protocols import power_iteration  # noqa: F401
from smcdp.protocols import dp_aggregate  # noqa: F401
from smcdp.protocols import keyword  # noqa: F401
