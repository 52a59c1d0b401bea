"""policies/model.py: `reach = "any"` only on a rule that matches owners alone, refused
at load naming the rule; `wide_contacts`, the owners it is granted to."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import ConfigError, load_rules, load_settings
from policies.model import Match, Rule, wide_contacts

OWNERS = frozenset({("sms", "+9"), ("mail", "me@x")})


@pytest.mark.parametrize(
    "match",
    [
        "{}",
        '{ principal = ["owner", "known"] }',
        '{ principal = ["known"] }',
        '{ channel = ["sms"] }',
    ],
)
def test_reach_any_on_a_rule_that_may_match_others_is_refused_naming_it(
    tmp_path: Path, match: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'[[routes]]\nname = "too-wide"\nmatch = {match}\nreach = "any"\n')
    with pytest.raises(ConfigError, match=r"routes\.0.*too-wide.*reach = \"any\""):
        load_settings(path)


def test_a_policies_file_is_checked_the_same(tmp_path: Path) -> None:
    rules = tmp_path / "p.toml"
    rules.write_text('[[rules]]\nname = "wide"\nreach = "any"\n')
    path = tmp_path / "c.toml"
    path.write_text(f'policies_file = "{rules}"\n')
    with pytest.raises(ConfigError, match=r"wide"):
        load_rules(load_settings(path))


def test_wide_contacts_are_the_owners_whose_dm_rule_grants_any() -> None:
    rules = (
        Rule(name="mail-owner", match=Match(principal=["owner"], channel=["mail"]), reach="any"),
        Rule(name="owners", match=Match(principal=["owner"])),
    )
    assert wide_contacts(rules, OWNERS) == (("mail", "me@x"),)
    assert wide_contacts((), OWNERS) == ()
    assert Rule(name="default").reach == "own"
