"""Private Postfix + Dovecot on loopback for the email adapter's tests and benchmark.

Both run from a temporary directory of their own (config, queue, mailboxes,
logs) and never read or change the machine's mail configuration: Postfix via
`-c DIR` (its own main.cf/master.cf, every service unchrooted), Dovecot via
`-c FILE`. Postfix accepts mail for `example.test` on a free loopback port and
hands it to Dovecot over LMTP on another; Dovecot serves IMAP on a third.
Accounts come from a passwd-file. Both must run as root (Postfix's master
drops to its `postfix` user, Dovecot's mail processes to `nobody`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.realservers.servers import _workdir, free_port, require, stop, wait_listening

DOMAIN = "example.test"
BUSY = f"busy@{DOMAIN}"  # an address Postfix always answers 450 (see POSTFIX_MAIN)
MAIL_UID = 65534  # nobody: Dovecot refuses root-owned mailboxes by default


@dataclass
class MailServer:
    host: str
    smtp_port: int
    imap_port: int
    workdir: Path
    procs: list[subprocess.Popen[bytes]]
    accounts: dict[str, str] = field(default_factory=dict)  # address -> password

    def log(self) -> str:
        return _log(self.workdir)


def _log(work: Path) -> str:
    parts = []
    for name in ("postfix.log", "postfix.out", "dovecot.log", "dovecot.out"):
        with contextlib.suppress(FileNotFoundError):
            parts.append(f"--- {name}\n" + (work / name).read_text(errors="replace"))
    return "\n".join(parts)


DOVECOT_CONF = """\
base_dir = {work}/dovecot-run
state_dir = {work}/dovecot-state
instance_name = dovecot-test-{imap_port}
log_path = {work}/dovecot.log
protocols = imap lmtp
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
auth_failure_delay = 0
default_login_user = dovenull
default_internal_user = dovecot
first_valid_uid = {uid}
last_valid_uid = {uid}
mail_location = maildir:~/Maildir
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {work}/passwd
}}
userdb {{
  driver = passwd-file
  args = username_format=%u {work}/passwd
  default_fields = uid={uid} gid={uid} home={work}/mail/%u
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {imap_port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service lmtp {{
  inet_listener lmtp {{
    address = 127.0.0.1
    port = {lmtp_port}
  }}
}}
"""

POSTFIX_MAIN = """\
compatibility_level = 3.6
queue_directory = {work}/postfix-queue
data_directory = {work}/postfix-data
maillog_file = {work}/postfix.log
maillog_file_prefixes = {work}
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
myhostname = mail.{domain}
mydomain = {domain}
myorigin = {domain}
mydestination =
mynetworks = 127.0.0.0/8
alias_maps =
alias_database =
local_transport = error:local delivery is off
default_transport = error:only {domain} is served here
relayhost =
virtual_mailbox_domains = {domain}
virtual_mailbox_maps = inline:{{ {mailboxes} }}
virtual_transport = lmtp:inet:127.0.0.1:{lmtp_port}
smtpd_relay_restrictions = permit_mynetworks, reject_unauth_destination
# busy@ is always answered 450 (a temporary failure): the tests' 4xx.
smtpd_recipient_restrictions = check_recipient_access inline:{{ {{ {busy} = 450 4.2.1 busy }} }}
smtp_dns_support_level = disabled
lmtp_host_lookup = native
biff = no
append_dot_mydomain = no
smtputf8_enable = no
"""

# Every service unchrooted: the queue is a temporary directory without the
# chroot's copies of /etc files.
POSTFIX_MASTER = """\
127.0.0.1:{smtp_port} inet n - n - - smtpd
pickup    unix n - n 60   1 pickup
cleanup   unix n - n -    0 cleanup
qmgr      unix n - n 300  1 qmgr
rewrite   unix - - n -    - trivial-rewrite
bounce    unix - - n -    0 bounce
defer     unix - - n -    0 bounce
trace     unix - - n -    0 bounce
verify    unix - - n -    1 verify
flush     unix n - n 1000? 0 flush
proxymap  unix - - n -    - proxymap
proxywrite unix - - n -   1 proxymap
smtp      unix - - n -    - smtp
relay     unix - - n -    - smtp
showq     unix n - n -    - showq
error     unix - - n -    - error
retry     unix - - n -    - error
discard   unix - - n -    - discard
lmtp      unix - - n -    - lmtp
anvil     unix - - n -    1 anvil
scache    unix - - n -    1 scache
postlog   unix-dgram n - n - 1 postlogd
"""


@contextlib.contextmanager
def start_mail(accounts: dict[str, str]) -> Iterator[MailServer]:
    """Postfix (SMTP) and Dovecot (IMAP, LMTP) for `example.test`, with the
    accounts given (local part -> password)."""
    postfix = require("postfix", "postfix")
    dovecot = require("dovecot", "dovecot-imapd")
    master = "/usr/lib/postfix/sbin/master"
    if not Path("/usr/lib/dovecot/lmtp").exists():
        raise RuntimeError(
            "Dovecot's LMTP server is not installed: the email tests need the Debian package"
            " 'dovecot-lmtpd' (scripts/setup installs it with apt-get when run as root)"
        )
    if os.getuid() != 0:
        raise RuntimeError("the email tests start Postfix and Dovecot, which must run as root")
    with _workdir("maild-") as work:
        work.chmod(0o755)  # Dovecot's mail processes run as `nobody`
        smtp_port, imap_port, lmtp_port = free_port(), free_port(), free_port()
        addresses = {f"{name}@{DOMAIN}": pw for name, pw in accounts.items()}
        (work / "passwd").write_text("".join(f"{a}:{pw}::::::\n" for a, pw in addresses.items()))
        (work / "mail").mkdir()
        os.chown(work / "mail", MAIL_UID, MAIL_UID)
        dovecot_conf = work / "dovecot.conf"
        dovecot_conf.write_text(
            DOVECOT_CONF.format(work=work, imap_port=imap_port, lmtp_port=lmtp_port, uid=MAIL_UID)
        )
        postfix_dir = work / "postfix"
        postfix_dir.mkdir()
        (work / "postfix-queue").mkdir()  # `postfix check` fills it
        (postfix_dir / "main.cf").write_text(
            POSTFIX_MAIN.format(
                work=work,
                domain=DOMAIN,
                busy=BUSY,
                lmtp_port=lmtp_port,
                mailboxes=", ".join(f"{a}=ok" for a in addresses),
            )
        )
        (postfix_dir / "master.cf").write_text(POSTFIX_MASTER.format(smtp_port=smtp_port))
        procs: list[subprocess.Popen[bytes]] = []
        try:
            with (work / "dovecot.out").open("ab") as out:
                procs.append(
                    subprocess.Popen(
                        [dovecot, "-F", "-c", str(dovecot_conf)], stdout=out, stderr=out
                    )
                )
            # Creates the queue's directories with their owners and modes.
            checked = subprocess.run(
                [postfix, "-c", str(postfix_dir), "check"], capture_output=True, timeout=60
            )
            if checked.returncode != 0:
                raise RuntimeError(f"postfix check failed:\n{checked.stderr!r}\n{_log(work)}")
            env = {**os.environ, "MAIL_CONFIG": str(postfix_dir)}
            with (work / "postfix.out").open("ab") as out:
                procs.append(
                    subprocess.Popen(
                        [master, "-c", str(postfix_dir), "-d"], stdout=out, stderr=out, env=env
                    )
                )
            wait_listening(imap_port, procs[0], work / "dovecot.log", 15)
            wait_listening(lmtp_port, procs[0], work / "dovecot.log", 15)
            wait_listening(smtp_port, procs[1], work / "postfix.log", 15)
            yield MailServer("127.0.0.1", smtp_port, imap_port, work, procs, addresses)
        finally:
            for proc in reversed(procs):
                stop(proc)
