"""docs/configuration.md is what `python -m broker.config_reference` prints now.

The reference is generated from the config model, so a key added, removed or
described differently in `broker/config.py` or `policies/model.py` fails here
until the file is regenerated; and a key with no description fails the
generator itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from broker import config_reference
from broker.config import Settings, load_rules, load_settings

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "configuration.md"
REGENERATE = "python -m broker.config_reference > docs/configuration.md"


def test_the_reference_is_what_the_model_generates() -> None:
    assert REFERENCE.read_text() == config_reference.render(), (
        f"docs/configuration.md is out of date with the config model: run `{REGENERATE}`"
    )


def documented_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    return {row[0] for row in config_reference.rows(model.__name__, model.model_fields, prefix)}


def test_every_key_of_every_section_is_in_the_reference() -> None:
    text = config_reference.render()
    for name, info in Settings.model_fields.items():
        assert f"`{name}`" in text or f"`[{name}" in text or f"`[[{name}]]`" in text
        inner = config_reference._strip_none(info.annotation)
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            for key in documented_keys(inner):
                assert f"| `{key}` |" in text, f"{name}.{key}"
    # The route rules' nested keys come dotted, as TOML writes them in a [[routes]] table.
    for key in ("match.principal", "session.persona", "queue.allowed", "rate.per_minute"):
        assert f"| `{key}` |" in text


def test_a_key_without_a_description_is_an_error_naming_it() -> None:
    class Section(BaseModel):
        """A section."""

        described: int = Field(1, description="Has one.")
        bare: int = 2

    with pytest.raises(ValueError, match=r"Section\.bare has no description"):
        config_reference.model_table(Section)


def test_a_section_without_a_docstring_is_an_error_naming_it() -> None:
    class Bare(BaseModel):
        key: int = Field(1, description="Described.")

    class Top(BaseModel):
        bare: Bare = Bare()

    with pytest.raises(ValueError, match="Bare has no docstring"):
        list(config_reference.sections(Top))


def test_types_bounds_and_defaults_come_from_the_model() -> None:
    names = ("max_frame_bytes", "socket_mode", "log_level", "policies_file")
    fields = {name: Settings.model_fields[name] for name in names}
    rows = {row[0]: row[1:3] for row in config_reference.rows("Settings", fields)}
    assert rows == {
        "max_frame_bytes": (
            "integer, ≥ 1_024 (1 KiB), ≤ 67_108_864 (64 MiB)",
            "`1_048_576 (1 MiB)`",
        ),
        "socket_mode": ("integer, ≥ 0, ≤ 511", "`0o660`"),
        "log_level": ('`"debug"` or `"info"` or `"warning"` or `"error"`', '`"info"`'),
        "policies_file": ("path", "unset"),
    }


def test_the_example_in_the_reference_is_a_valid_configuration(tmp_path: Path) -> None:
    example = config_reference.render().split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "broker.toml"
    path.write_text(example)
    settings = load_settings(path)
    rules = load_rules(settings)
    assert [rule.name for rule in rules] == ["owner", "strangers"]
    assert rules[0].session.persona == "helper" and "helper" in settings.personas
    assert rules[1].rate is not None and rules[1].rate.burst == 3


def test_the_example_configuration_loads() -> None:
    settings = load_settings(ROOT / "config" / "broker.example.toml")
    assert load_rules(settings) == ()
    assert settings.socket_path == Path("var/broker.sock")
    assert settings.ledger.path == Path("var/ledger.db")
