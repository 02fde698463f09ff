"""smcdp: secure multiparty computation with differentially private release."""

__version__ = "0.1.0"
