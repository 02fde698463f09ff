"""Protocol modules hold no process-global state (docs/architecture.md: a protocol takes parameters and a
channel and returns results): no mutable value at module or class level, no ``global``, no module-level
cache.  What a role wants a later session to know it returns, and its plug-in keeps."""

from __future__ import annotations

import ast
from pathlib import Path

import smcdp.protocols

PROTOCOLS = Path(smcdp.protocols.__file__).parent
MUTABLE_CALLS = {"dict", "list", "set", "bytearray", "defaultdict", "OrderedDict", "Counter", "deque"}
CACHES = {"lru_cache", "cache"}


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _mutable(value: ast.AST | None) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    return isinstance(value, ast.Call) and _name(value) in MUTABLE_CALLS


def global_state(source: str) -> list[str]:
    """Line: statement of every piece of process-global mutable state in a module's source."""
    tree = ast.parse(source)
    found = []

    def scope(body, where: str) -> None:
        for node in body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and _mutable(node.value):
                found.append(f"{node.lineno}: a mutable value at {where} level")
            elif isinstance(node, ast.ClassDef):
                scope(node.body, "class")
            elif isinstance(node, (ast.If, ast.Try)):
                scope(node.body + node.orelse, where)

    scope(tree.body, "module")
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found.append(f"{node.lineno}: global {', '.join(node.names)}")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += [
                f"{node.lineno}: a cache shared by every session ({node.name})"
                for d in node.decorator_list
                if _name(d) in CACHES
            ]
    return found


def test_no_protocol_module_holds_process_global_state():
    modules = sorted(PROTOCOLS.glob("*.py"))
    assert len(modules) >= 5
    bad = [f"{path.name}:{line}" for path in modules for line in global_state(path.read_text())]
    assert not bad, "process-global state in smcdp/protocols:\n" + "\n".join(bad)


def test_the_check_finds_what_it_looks_for():
    src = """
import functools
from types import MappingProxyType
LIMIT = 3
NAMES = ("a", "b")
CODES = MappingProxyType({"a": 1})
_last = {"key_bits": 2048}
seen: list[int] = []
pool = dict(a=1)
class Role:
    cache = {}
    def __init__(self):
        self.mine = {}
def learn(x):
    global LIMIT
    LIMIT = x
@functools.lru_cache(maxsize=None)
def table(n):
    return n
"""
    assert sorted(int(line.split(":")[0]) for line in global_state(src)) == [7, 8, 9, 11, 15, 18]
