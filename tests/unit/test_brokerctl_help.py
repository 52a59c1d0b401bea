"""brokerctl's help texts as a reader sees them: rich markup must not eat words
written in square brackets (`[erased]`, `[ledger]`)."""

from __future__ import annotations

from tests.ctl import in_process


def test_erase_help_names_what_group_words_become() -> None:
    done = in_process("erase", "--help", env={"COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    assert "their words in groups become [erased]" in " ".join(done.stdout.split())
