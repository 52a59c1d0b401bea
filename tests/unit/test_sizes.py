"""Issue 20's size rule: no production module over 500 lines, no class over 300.

Small pieces that each do one thing; the modules another pass still splits are
listed in `LATER`, and nothing else may break the rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "ledger", "adapters", "policies")
MAX_MODULE = 500
MAX_CLASS = 300
LATER: set[str] = set()


def too_big() -> dict[str, int]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            source = path.read_text()
            if (lines := len(source.splitlines())) > MAX_MODULE:
                found[name] = lines
            for node in ast.walk(ast.parse(source, name)):
                if isinstance(node, ast.ClassDef):
                    assert node.end_lineno is not None
                    if (lines := node.end_lineno - node.lineno + 1) > MAX_CLASS:
                        found[f"{name}:{node.name}"] = lines
    return found


def test_no_module_over_500_lines_and_no_class_over_300_but_the_later_ones() -> None:
    assert {k: v for k, v in too_big().items() if k not in LATER} == {}
