"""The fuzzers' known bugs: a case found and not yet fixed runs as ``xfail(strict=True)`` with its diagnosis, so it
flips to a failure (XPASS) the day it is fixed and its entry must go."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest


def known_attack(reason: str) -> pytest.MarkDecorator:
    """A demonstrated attack the code does not stop yet: a strict expected failure whose test asserts that the attack
    fails, so it flips to XPASS the day it is stopped.  Only the test's own assertion counts (``raises``): an error
    in the attack's code is a failure, not an expected one."""
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)


def params_with_known_bugs(cases: Iterable[Any], known_bugs: Mapping[str, str]) -> list[Any]:
    """``pytest.param(case, id=case.id)`` for each case, a strict xfail carrying the diagnosis where it is known."""
    out = []
    for c in cases:
        marks = [pytest.mark.xfail(strict=True, reason=known_bugs[c.id])] if c.id in known_bugs else []
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


def check_cases(cases: list[Any], build, known_bugs: Mapping[str, str], bugs=None) -> None:
    """A fuzzer's cases are unique and the same on every build, and every known bug names a case (once, when the
    diagnoses are given as ``bugs``: (diagnosis, case ids) pairs)."""
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    assert [c.id for c in build()] == ids
    assert set(known_bugs) <= set(ids), sorted(set(known_bugs) - set(ids))
    if bugs is not None:
        assert len(known_bugs) == sum(len(set(ids_)) for _why, ids_ in bugs), "a case is in two diagnoses"


_REPO = Path(__file__).resolve().parents[2]


def smcdp_origin(exc: BaseException) -> str:
    """The innermost smcdp frame (not a test's) an escaped exception passed through, as file:line -- where a fuzzer's
    diagnosis starts."""
    where = "?"
    tb = exc.__traceback__
    while tb is not None:
        f = tb.tb_frame.f_code.co_filename
        if f"{os.sep}smcdp{os.sep}" in f and f"{os.sep}tests{os.sep}" not in f:
            where = f"{os.path.relpath(f, _REPO)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where
