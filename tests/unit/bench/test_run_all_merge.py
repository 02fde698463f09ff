"""``make bench`` rewrites docs/benchmarks.md: a run's output replaces only what an earlier run generated
(the blocks between the markers); no hand-written line is lost (bench/run_all.py, merge_report)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "benchmarks.md"


def _run_all():
    spec = importlib.util.spec_from_file_location("run_all", ROOT / "bench" / "run_all.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


R = _run_all()


def _generated(titles: list[str], body: str = "run {i}") -> str:
    parts = ["# Benchmarks", "", "Machine: this run.", ""]
    for i, t in enumerate(titles):
        parts += [t, "", body.format(i=i), ""]
    return "\n".join(parts) + "\n"


def _run_titles() -> list[str]:
    """Every ``## `` heading bench/run_all.py writes."""
    src = (ROOT / "bench" / "run_all.py").read_text()
    inline = re.findall(r'"(## [^"]+)"', src)
    return [t for t in inline if "{" not in t] + [f"## {title}" for _, title, _ in R.BENCH_SECTIONS]


def test_every_heading_a_run_writes_is_a_heading_of_the_report():
    """A renamed section would otherwise be appended at the end, beside its stale namesake."""
    heads = {ln.strip() for ln in DOC.read_text().splitlines() if ln.startswith("## ")}
    assert [t for t in _run_titles() if t not in heads] == []


def test_a_full_run_loses_no_hand_written_line_of_the_report_and_a_second_run_replaces_only_its_blocks():
    text = DOC.read_text()
    titles = _run_titles()
    once = R.merge_report(text, _generated(titles, "RUN-ONE-{i}"))
    kept = [ln for ln in text.splitlines() if ln.strip()]
    out_lines = once.splitlines()
    pos = 0
    for ln in kept:  # every non-blank line of the report, in its order
        pos = out_lines.index(ln, pos) + 1
    assert once.count(R.BEGIN) == len(titles) + 1  # every generated section and the preamble
    twice = R.merge_report(once, _generated(titles, "RUN-TWO-{i}"))
    assert "RUN-ONE-" not in twice and twice.count("RUN-TWO-") == len(titles)
    assert twice.replace("RUN-TWO-", "RUN-ONE-") == once


def test_generated_blocks_go_under_their_headings_new_sections_at_the_end_failures_change_nothing():
    existing = "\n".join(
        [
            "# Benchmarks",
            "",
            "Hand-written note on the hosts.",
            "",
            "## A",
            "",
            "old notes of A",
            "",
            "```sh",
            "## not a heading",
            "```",
            "",
            "## B",
            "",
            "kept B",
            "",
            "## C",
            "",
            "C's record",
            "",
        ]
    )
    generated = "\n".join(
        [
            "# Benchmarks",
            "",
            "Machine: m.",
            "",
            "## A",
            "",
            "A's table",
            "",
            "## C",
            "",
            "_failed in this run: boom_",
            "",
            "## D",
            "",
            "D's table",
            "",
        ]
    )
    out = R.merge_report(existing, generated)
    B, E = R.BEGIN, R.END
    assert (
        out
        == "\n".join(
            [
                "# Benchmarks",
                "",
                B,
                "Machine: m.",
                E,
                "",
                "Hand-written note on the hosts.",
                "",
                "## A",
                "",
                B,
                "A's table",
                E,
                "",
                "old notes of A",
                "",
                "```sh",
                "## not a heading",
                "```",
                "",
                "## B",
                "",
                "kept B",
                "",
                "## C",
                "",
                "C's record",
                "",
                "## D",
                "",
                B,
                "D's table",
                E,
            ]
        )
        + "\n"
    )


def test_duplicate_headings_are_refused():
    with pytest.raises(ValueError, match="two sections"):
        R.merge_report("# B\n\n## A\n\nx\n\n## A\n\ny\n", _generated(["## A"]))
