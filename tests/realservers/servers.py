"""Real chat servers on loopback for the adapter tests and benchmarks.

Each server runs from a temporary config and data directory on a free port of
127.0.0.1 and is stopped (SIGTERM, then SIGKILL) at the end. A server that is
not installed is a failure that names the package: `scripts/setup` installs
it (`apt-get install -y --no-install-recommends ngircd prosody`).

Synapse (Matrix) runs from its own venv (`.venv-synapse`, or $SYNAPSE_VENV):
its dependency pins would clash with ours. Email (Postfix + Dovecot, two servers
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
    http_port: int | None = None  # a server's HTTP side, where it has one (Prosody's uploads)

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
def _workdir(prefix: str, where: str = "/tmp") -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=where))
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
{tls}"""

NGIRCD_TLS = """\
[SSL]
CertFile = {work}/cert.pem
KeyFile = {work}/key.pem
Ports = {port}
"""


def self_signed_cert(work: Path) -> Path:
    """A certificate for 127.0.0.1 (cert.pem, key.pem in `work`), made by openssl."""
    openssl = require("openssl", "openssl")
    files = ["-keyout", str(work / "key.pem"), "-out", str(work / "cert.pem")]
    subject = ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", *files, *subject],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return work / "cert.pem"


@contextlib.contextmanager
def start_ngircd(
    password: str | None = None, penalties: bool = False, tls: bool = False
) -> Iterator[Server]:
    """ngIRCd on loopback. `penalties=False` turns off its flood throttle
    (MaxPenaltyTime = 0) so tests and benchmarks are not paced at ~1 line/s.
    `tls`: the server's port speaks TLS only, with a self-signed certificate
    (workdir/cert.pem, for 127.0.0.1); ngIRCd must be built with SSL."""
    binary = require("ngircd", "ngircd")
    with _workdir("ircd-") as work:
        port = free_port()
        plain_port = free_port() if tls else port  # ngIRCd always listens in plain too
        if tls:
            self_signed_cert(work)
            if (
                "+SSL"
                not in subprocess.run([binary, "--version"], capture_output=True).stdout.decode()
            ):
                raise ServerMissing("this ngIRCd is built without SSL: the IRC TLS test needs it")
        conf = work / "ngircd.conf"
        conf.write_text(
            NGIRCD_CONF.format(
                port=plain_port,
                tls=NGIRCD_TLS.format(work=work, port=port) if tls else "",
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
plugin_paths = {{ "{plugins}" }}
modules_enabled = {{ "roster", "saslauth", "disco", "ping", "mam", "smacks"{modules} }}
modules_disabled = {{ "s2s", "offline" }}
c2s_ports = {{ {port} }}
c2s_interfaces = {{ "127.0.0.1" }}
s2s_ports = {{}}
-- HTTP only for XEP-0363 uploads (upload.localhost), at 127.0.0.1: *.localhost
-- names do not resolve everywhere, so requests for any host go to the uploads.
http_ports = {{ {http_port} }}
http_interfaces = {{ "127.0.0.1" }}
http_default_host = "upload.localhost"
http_external_url = "http://127.0.0.1:{http_port}/"
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
{extra}
VirtualHost "localhost"
Component "conference.localhost" "muc"
  modules_enabled = {{ "muc_mam" }}
  muc_log_by_default = true
  muc_room_locking = false
  restrict_room_creation = false
Component "upload.localhost" "http_file_share"
  http_file_share_size_limit = 1048576
"""


@contextlib.contextmanager
def start_prosody(
    accounts: dict[str, str], modules: tuple[str, ...] = (), extra: str = ""
) -> Iterator[Server]:
    """Prosody on loopback for `localhost` (MUC at conference.localhost), with
    mod_mam, mod_muc_mam and mod_smacks, XEP-0363 uploads (upload.localhost, served
    at http://127.0.0.1:`http_port`/file_share/), and the accounts given (name -> password).
    `modules` are enabled too (from Prosody or from prosody_modules/ here), `extra`
    is more global config (Lua; "{work}" in it is the server's directory)."""
    binary = require("prosody", "prosody")
    ctl = require("prosodyctl", "prosody")
    with _workdir("xmppd-") as work:
        port, http_port = free_port(), free_port()
        while http_port == port:
            http_port = free_port()
        (work / "data").mkdir()
        (work / "certs").mkdir()
        conf = work / "prosody.cfg.lua"
        conf.write_text(
            PROSODY_CONF.format(
                port=port,
                http_port=http_port,
                work=work,
                user=getpass.getuser(),
                plugins=Path(__file__).parent / "prosody_modules",
                modules="".join(f', "{name}"' for name in modules),
                extra=extra.replace("{work}", str(work)),
            )
        )
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
            wait_listening(http_port, proc, log, 15)
            yield Server("prosody", "127.0.0.1", port, work, proc, dict(accounts), http_port)
        finally:
            stop(proc)


SYNAPSE_CONF = """\
server_name: "localhost"
public_baseurl: "http://127.0.0.1:{port}/"
pid_file: "{work}/homeserver.pid"
listeners:
  - port: {port}
    bind_addresses: ["127.0.0.1"]
    type: http
    tls: false
    x_forwarded: false
    resources: [{{names: [client], compress: false}}]
database:
  name: sqlite3
  args: {{database: "{work}/homeserver.db"}}
log_config: "{work}/log.yaml"
media_store_path: "{work}/media"
signing_key_path: "{work}/signing.key"
registration_shared_secret: "{secret}"
report_stats: false
enable_metrics: false
trusted_key_servers: []
suppress_key_server_warning: true
federation_domain_whitelist: []
url_preview_enabled: false
presence: {{enabled: false}}
# A password hashed or checked at Synapse's default 12 rounds costs 0.26 s of CPU
# (registering each account, each login), several seconds at a load of 10.
bcrypt_rounds: 4
# Relaxed for the tests; the rate-limit test tightens one user through the
# admin API (override_ratelimit) instead.
rc_message: {{per_second: 1000, burst_count: 1000}}
rc_registration: {{per_second: 1000, burst_count: 1000}}
rc_login:
  address: {{per_second: 1000, burst_count: 1000}}
  account: {{per_second: 1000, burst_count: 1000}}
  failed_attempts: {{per_second: 1000, burst_count: 1000}}
rc_joins:
  local: {{per_second: 1000, burst_count: 1000}}
rc_invites:
  per_room: {{per_second: 1000, burst_count: 1000}}
  per_user: {{per_second: 1000, burst_count: 1000}}
  per_issuer: {{per_second: 1000, burst_count: 1000}}
"""

SYNAPSE_LOG = """\
version: 1
formatters: {{precise: {{format: "%(asctime)s %(name)s %(levelname)s %(message)s"}}}}
handlers:
  file: {{class: logging.FileHandler, formatter: precise, filename: "{work}/server.log"}}
root: {{level: WARNING, handlers: [file]}}
disable_existing_loggers: false
"""


def synapse_python() -> Path:
    """The Python of Synapse's own venv (its pins would clash with ours)."""
    root = Path(__file__).resolve().parents[2]
    python = Path(os.environ.get("SYNAPSE_VENV", root / ".venv-synapse")) / "bin" / "python"
    probe = (
        subprocess.run(
            [str(python), "-c", "import synapse"], capture_output=True, check=False, timeout=60
        )
        if python.exists()
        else None
    )
    if probe is None or probe.returncode != 0:
        raise ServerMissing(
            f"Synapse is not installed in {python.parent.parent}: the Matrix adapter tests need"
            " the PyPI package 'matrix-synapse' in its own venv (scripts/setup dev installs it)"
        )
    return python


def register_matrix_user(base: str, secret: str, name: str, password: str, admin: bool) -> None:
    """Register through Synapse's shared-secret admin API (what register_new_matrix_user does)."""
    import hashlib
    import hmac

    import httpx

    url = f"{base}/_synapse/admin/v1/register"
    nonce = httpx.get(url, timeout=10).json()["nonce"]
    # The MAC covers nonce\0user\0password\0admin-flag, with no trailing NUL.
    mac = hmac.new(secret.encode(), digestmod=hashlib.sha1)
    mac.update(b"\x00".join(p.encode() for p in (nonce, name, password)))
    mac.update(b"\x00" + (b"admin" if admin else b"notadmin"))
    body = {"nonce": nonce, "username": name, "password": password, "admin": admin}
    body["mac"] = mac.hexdigest()
    answer = httpx.post(url, json=body, timeout=30)
    answer.raise_for_status()


@contextlib.contextmanager
def start_synapse(accounts: dict[str, str], admins: tuple[str, ...] = ()) -> Iterator[Server]:
    """Synapse on loopback for `localhost` (SQLite, client API only, rate limits
    relaxed), with the accounts given (name -> password; `admins` among them)."""
    python = synapse_python()
    # Synapse commits each event with several fsyncs (SQLite): ~37 ms a message on
    # this VM's disk, ~21 ms on tmpfs. Its data is thrown away anyway.
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else "/tmp"
    with _workdir("matrixd-", shm) as work:
        port = free_port()
        secret = os.urandom(16).hex()
        conf = work / "homeserver.yaml"
        conf.write_text(SYNAPSE_CONF.format(port=port, work=work, secret=secret))
        (work / "log.yaml").write_text(SYNAPSE_LOG.format(work=work))
        app = "synapse.app.homeserver"
        subprocess.run(
            [str(python), "-m", app, "-c", str(conf), "--generate-keys"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        with (work / "stdout.log").open("ab") as out:
            proc = subprocess.Popen(
                [str(python), "-m", app, "-c", str(conf)], stdout=out, stderr=out, cwd=work
            )
        try:
            wait_listening(port, proc, work / "stdout.log", 120)
            base = f"http://127.0.0.1:{port}"
            for name, password in accounts.items():
                register_matrix_user(base, secret, name, password, name in admins)
            yield Server("synapse", "127.0.0.1", port, work, proc, dict(accounts))
        finally:
            stop(proc)
