"""adapters.irc over TLS against a real ngIRCd with a certificate the test made.

The server's certificate is self-signed for 127.0.0.1: the adapter trusts it
through `tls_ca_file`; without that, it must refuse the server (certificate
verification fails), say so in its log, and give up with exit 75.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import DaemonFactory
from tests.integration.wire import uniq, wait_db
from tests.realservers.irc_client import IrcClient, privmsg_from
from tests.realservers.processes import START_WITHIN_S, AdapterProcess
from tests.realservers.servers import Server
from tests.realservers.test_irc import asyncio_only, irc_config, start_adapter


@pytest.mark.anyio
@asyncio_only
async def test_a_dm_is_answered_over_tls(
    ngircd_tls: Server, make_daemon: DaemonFactory, adapters: list[AdapterProcess], short_tmp: Path
) -> None:
    d = make_daemon()
    ca = ngircd_tls.workdir / "cert.pem"
    bot = uniq("b")[:9]
    ann = await IrcClient.connect(ngircd_tls.port, uniq("a")[:9], ca_file=ca)
    cfg = irc_config(d.socket, ngircd_tls, bot, tls=True, tls_ca_file=str(ca))
    proc = start_adapter(adapters, short_tmp, cfg)
    proc.wait_connected()
    await ann.say(bot, "hello over tls")
    dm = await ann.expect(privmsg_from(bot))
    assert dm.params == [ann.nick, "hello over tls"]
    await wait_db(d, "SELECT count(*) FROM outbox WHERE status = 'delivered'", (), 1)
    await ann.aclose()


def test_an_untrusted_certificate_is_refused_then_exit_75(
    ngircd_tls: Server, make_daemon: DaemonFactory, adapters: list[AdapterProcess], short_tmp: Path
) -> None:
    d = make_daemon()
    cfg = irc_config(d.socket, ngircd_tls, uniq("b")[:9], tls=True)
    cfg["adapter"]["give_up_s"] = 1
    proc = start_adapter(adapters, short_tmp, cfg)
    assert proc.proc is not None
    assert proc.wait_exit(START_WITHIN_S) == 75
    assert "certificate verify failed" in proc.log()
