"""Session leases through the port: taken only when free, every taking a larger token,
a renewal or release only by the taking that holds it (ledger/leases.py)."""

from __future__ import annotations

import pytest

from ledger.port.protocols import LedgerPort

pytestmark = pytest.mark.anyio
TTL = 1_000


async def test_a_lease_is_taken_only_once_the_last_one_lapsed(port: LedgerPort) -> None:
    first = await port.take_lease("s1", "a:1", 10_000, TTL)
    assert (first.taken, first.holder, first.expires_at) == (True, "a:1", 11_000)
    held = await port.take_lease("s1", "b:2", 10_999, TTL)
    assert (held.taken, held.token, held.holder, held.expires_at) == (
        False,
        first.token,
        "a:1",
        11_000,
    )
    other = await port.take_lease("s2", "b:2", 10_999, TTL)  # another session's is its own
    assert other.taken
    second = await port.take_lease("s1", "b:2", 11_000, TTL)
    assert (second.taken, second.holder, second.expires_at) == (True, "b:2", 12_000)
    assert second.token > first.token


async def test_only_the_holding_taking_renews_or_releases(port: LedgerPort) -> None:
    first = await port.take_lease("s1", "a:1", 10_000, TTL)
    assert await port.renew_lease("s1", first.token, 10_500, TTL)
    assert not (await port.take_lease("s1", "b:2", 11_200, TTL)).taken  # renewed to 11,500
    second = await port.take_lease("s1", "b:2", 11_500, TTL)
    assert second.taken
    assert not await port.renew_lease("s1", first.token, 11_600, TTL)  # lost for good
    await port.submit_release_lease("s1", first.token).result()  # changes nothing
    assert not (await port.take_lease("s1", "c:3", 11_700, TTL)).taken
    await port.submit_release_lease("s1", second.token).result()
    third = await port.take_lease("s1", "c:3", 11_700, TTL)
    assert third.taken and third.token > second.token


async def test_a_lapsed_lease_nobody_took_is_renewed_by_its_holder(port: LedgerPort) -> None:
    first = await port.take_lease("s1", "a:1", 10_000, TTL)
    assert await port.renew_lease("s1", first.token, 12_000, TTL)
    assert not (await port.take_lease("s1", "b:2", 12_500, TTL)).taken


async def test_a_released_lease_is_renewed_no_more(port: LedgerPort) -> None:
    """A renewal of the taking that released it, committed after the release (sent
    before it, from a busy writer), is refused: the lease stays free."""
    first = await port.take_lease("s1", "a:1", 10_000, TTL)
    await port.submit_release_lease("s1", first.token).result()
    assert not await port.renew_lease("s1", first.token, 10_100, TTL)
    second = await port.take_lease("s1", "b:2", 10_200, TTL)
    assert second.taken and second.token > first.token
