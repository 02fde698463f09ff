"""``make bench`` rewrites docs/benchmarks.md: what it generates replaces its sections, the hand-written
records stay (bench/run_all.py, merge_report)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _run_all():
    spec = importlib.util.spec_from_file_location("run_all", ROOT / "bench" / "run_all.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


EXISTING = """# Benchmarks

Machine: old.

## Paillier micro-benchmarks

old table

### What limits encryption

old profile

### Subgroup keys (hand-written)

kept subgroup record

## Keyword online phase (hand-written)

kept profile

## DP aggregation

old aggregation
"""

GENERATED = """# Benchmarks

Machine: new.

## Paillier micro-benchmarks

new table

### What limits encryption

new profile

## DP aggregation

new aggregation

## A new bench

new section
"""


def test_generated_sections_replace_theirs_and_hand_written_records_stay():
    out = _run_all().merge_report(EXISTING, GENERATED)
    assert (
        out
        == """# Benchmarks

Machine: new.

## Paillier micro-benchmarks

new table

### What limits encryption

new profile

### Subgroup keys (hand-written)

kept subgroup record

## Keyword online phase (hand-written)

kept profile

## DP aggregation

new aggregation

## A new bench

new section
"""
    )


def test_the_real_report_keeps_every_section_heading_when_merged_with_a_partial_run():
    """docs/benchmarks.md merged with a run that generates only its first section loses no ## heading."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    partial = "# Benchmarks\n\nMachine: x.\n\n## Paillier micro-benchmarks (2048-bit, one core)\n\nnew\n"
    out = _run_all().merge_report(text, partial)
    heads = [ln for ln in text.splitlines() if ln.startswith("## ")]
    assert [ln for ln in out.splitlines() if ln.startswith("## ")] == heads
    subs = [ln for ln in text.splitlines() if ln.startswith("### ")]
    assert [ln for ln in out.splitlines() if ln.startswith("### ")] == subs
