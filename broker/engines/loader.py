"""Code the operator names in the config as "module:attribute", found at start.

A reference that cannot be used (not of the form `module:attribute`, a module that
is missing or raises on import, an attribute that is absent) is a `ConfigError`
naming the config key, raised while the daemon starts, before it takes any work:
never at the first turn. Modules are looked up on `sys.path`, then in the config
file's folder (added to the end of `sys.path` once, so a module there may import
its neighbours).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from broker.config import ConfigError, EngineSettings

# The key that names the code, by engine kind.
ENTRY_KEYS = {"python": "entry", "openai-agents": "agent", "adk": "agent", "langgraph": "graph"}


def add_config_folder(config: Path | None) -> None:
    """Make modules beside the config file importable (after everything on sys.path)."""
    if config is None:
        return
    folder = str(config.resolve().parent)
    if folder not in sys.path:
        sys.path.append(folder)


def resolve(reference: str | None, key: str) -> object:
    """The object `reference` ("package.module:attr.sub") names; ConfigError naming `key`."""
    if not reference:
        raise ConfigError(f'invalid configuration: {key} is required ("module:attribute")')
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(
            f'invalid configuration: {key} = {reference!r} is not of the form "module:attribute"'
        )
    try:
        found: object = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # whatever its import raised: the operator's code
        raise ConfigError(
            f"invalid configuration: {key} = {reference!r}: importing {module_name} failed:"
            f" {type(exc).__name__}: {exc}"
        ) from exc
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError as exc:
            raise ConfigError(
                f"invalid configuration: {key} = {reference!r}: {module_name} has no"
                f" attribute {attribute!r}"
            ) from exc
    return found


def entry_key(settings: EngineSettings, section: str) -> str:
    return f"{section}.{ENTRY_KEYS[settings.kind]}"


def entry_of(settings: EngineSettings) -> str | None:
    value = getattr(settings, ENTRY_KEYS[settings.kind])
    return value if isinstance(value, str) else None
