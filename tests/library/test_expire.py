"""`Store.expire`: the library's retention, to the bytes of the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.api import Store

pytestmark = pytest.mark.anyio


def raw(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.glob("s.db*"))


async def test_expire_keeps_the_head_and_removes_the_rest(tmp_path: Path) -> None:
    now = [1_700_000_000_000]
    store = await Store.open(tmp_path / "s.db", clock=lambda: now[0])
    try:
        for n in range(3):
            await store.append("chat", [{"role": "user", "content": f"zqxold{n}qq"}])
            now[0] += 86_400_000  # a day between them
        before = raw(tmp_path)
        assert b"zqxold0qq" in before
        assert await store.expire(1.5) == 2  # they ended 3 and 2 days ago
        assert await store.expire(1.5) == 0
        assert await store.expire(0.5) == 0  # the third is the head
        items = await store.items("chat")
        assert [i["content"] for i in items] == ["zqxold2qq"]
        after = raw(tmp_path)
        assert b"zqxold0qq" not in after and b"zqxold1qq" not in after
    finally:
        await store.aclose()
