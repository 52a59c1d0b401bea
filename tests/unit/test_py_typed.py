"""Every installed package says it is typed (PEP 561): a `py.typed` marker in each
top-level package, which the package data installs."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_marked_typed_and_the_marker_installs() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = [p.rstrip("*") for p in setuptools["packages"]["find"]["include"]]
    assert packages and all((ROOT / p / "__init__.py").is_file() for p in packages)
    missing = [p for p in packages if not (ROOT / p / "py.typed").is_file()]
    assert missing == []
    data = setuptools["package-data"]
    installed = [p for p in packages if "py.typed" in data.get(p, data.get("*", []))]
    assert installed == packages
