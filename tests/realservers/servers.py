"""Real chat servers on loopback for the adapter tests and benchmarks.

Each server runs from a temporary config and data directory on a free port of
127.0.0.1 and is stopped (SIGTERM, then SIGKILL) at the end. A server that is
not installed is a failure that names the package: `scripts/setup` installs
it (`apt-get install -y --no-install-recommends ngircd prosody`).

Matrix (Synapse in its own venv) would follow the same shape: a `start_*`
context manager yielding a `Server`. Email (Postfix + Dovecot, two servers
and three ports) is in mailservers.py.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


class ServerMissing(RuntimeError):
    """A server binary is not installed."""


@dataclass
class Server:
    name: str
    host: str
    port: int
    workdir: Path
    proc: subprocess.Popen[bytes]
    accounts: dict[str, str] = field(default_factory=dict)  # name -> password

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    def log(self) -> str:
        with contextlib.suppress(FileNotFoundError):
            return self.log_path.read_text(errors="replace")
        return ""


def require(binary: str, package: str) -> str:
    path = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/bin:/sbin")
    if path is None:
        raise ServerMissing(
            f"{binary} is not installed: the adapter tests need the Debian package {package!r}"
            f" (scripts/setup installs it with apt-get when run as root)"
        )
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}:\n{_text(log)}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.02)
    raise TimeoutError(f"the server did not listen on {port} within {within}s:\n{_text(log)}")


def _text(path: Path) -> str:
    with contextlib.suppress(FileNotFoundError):
        return path.read_text(errors="replace")
    return "(no log)"


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextlib.contextmanager
def _workdir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


NGIRCD_CONF = """\
[Global]
Name = irc.test
Info = agent-broker test server
Listen = 127.0.0.1
Ports = {port}
PidFile = {work}/ngircd.pid
MotdPhrase = test
ServerUID = {uid}
ServerGID = {gid}
{password}
[Limits]
MaxConnectionsIP = 0
MaxPenaltyTime = {penalty}
PingTimeout = 120
[Options]
DNS = no
Ident = no
PAM = no
"""


@contextlib.contextmanager
def start_ngircd(password: str | None = None, penalties: bool = False) -> Iterator[Server]:
    """ngIRCd on loopback. `penalties=False` turns off its flood throttle
    (MaxPenaltyTime = 0) so tests and benchmarks are not paced at ~1 line/s."""
    binary = require("ngircd", "ngircd")
    with _workdir("ircd-") as work:
        port = free_port()
        conf = work / "ngircd.conf"
        conf.write_text(
            NGIRCD_CONF.format(
                port=port,
                work=work,
                uid=os.getuid(),
                gid=os.getgid(),
                password=f"Password = {password}" if password else "",
                penalty=-1 if penalties else 0,
            )
        )
        log = work / "server.log"
        with log.open("ab") as out:
            proc = subprocess.Popen([binary, "-n", "-f", str(conf)], stdout=out, stderr=out)
        try:
            wait_listening(port, proc, log, 10)
            yield Server("ngircd", "127.0.0.1", port, work, proc)
        finally:
            stop(proc)


PROSODY_CONF = """\
pidfile = "{work}/prosody.pid"
data_path = "{work}/data"
prosody_user = "{user}"
run_as_root = true
admins = {{}}
plugin_paths = {{}}
modules_enabled = {{ "roster", "saslauth", "disco", "ping", "mam", "smacks" }}
modules_disabled = {{ "s2s", "offline" }}
c2s_ports = {{ {port} }}
c2s_interfaces = {{ "127.0.0.1" }}
s2s_ports = {{}}
http_ports = {{}}
https_ports = {{}}
c2s_direct_tls_ports = {{}}
legacy_ssl_ports = {{}}
certificates = "{work}/certs"
c2s_require_encryption = false
allow_unencrypted_plain_auth = true
authentication = "internal_hashed"
storage = "internal"
default_archive_policy = true
archive_expires_after = "1d"
smacks_hibernation_time = 5
-- Without it Prosody's small writes (a stanza, then its <r/>) wait out the
-- peer's delayed ACK (Nagle): ~40 ms per stream-managed reply.
network_settings = {{ tcp_nodelay = true }}
log = {{ {{ levels = {{ min = "info" }}, to = "file", filename = "{work}/server.log" }} }}
VirtualHost "localhost"
Component "conference.localhost" "muc"
  modules_enabled = {{ "muc_mam" }}
  muc_log_by_default = true
  muc_room_locking = false
  restrict_room_creation = false
"""


@contextlib.contextmanager
def start_prosody(accounts: dict[str, str]) -> Iterator[Server]:
    """Prosody on loopback for `localhost` (MUC at conference.localhost), with
    mod_mam, mod_muc_mam and mod_smacks, and the accounts given (name -> password)."""
    binary = require("prosody", "prosody")
    ctl = require("prosodyctl", "prosody")
    with _workdir("xmppd-") as work:
        port = free_port()
        (work / "data").mkdir()
        (work / "certs").mkdir()
        conf = work / "prosody.cfg.lua"
        conf.write_text(PROSODY_CONF.format(port=port, work=work, user=getpass.getuser()))
        for name, password in accounts.items():
            subprocess.run(
                [ctl, "--config", str(conf), "register", name, "localhost", password],
                check=True,
                capture_output=True,
                timeout=30,
            )
        log = work / "server.log"
        with (work / "stdout.log").open("ab") as out:
            proc = subprocess.Popen([binary, "-F", "--config", str(conf)], stdout=out, stderr=out)
        try:
            wait_listening(port, proc, log, 15)
            yield Server("prosody", "127.0.0.1", port, work, proc, dict(accounts))
        finally:
            stop(proc)
