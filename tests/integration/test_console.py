"""The web console (`[console]`) in a real headless Chromium, and its refusals over HTTP.

Chromium and chromedriver are Debian's (`scripts/setup dev` installs them),
driven by Selenium with the system's browser; nothing is downloaded. Every
page loads without a console error and is saved as a screenshot under the
test's tmp dir; the turn tree shows a fork; a running turn streams into the
open session page; an action from the page changes the ledger. Over plain
HTTP: 401 without a token or with a wrong one (saying nothing else), 404 for a
session that does not exist, 403 for an action with a `read` token (nothing
changed). A token file readable by others, a missing one, or an address in use
stop the start with exit 78 naming the key.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess, brokerd_once, write_config
from tests.integration.observe_servers import free_port, program
from wire.client import BrokerClient

ADMIN = "admin-token-0123456789abcdef"
READ = "read-token-0123456789abcdef"
STREAMED = "one two three four five six seven eight nine ten eleven twelve"


def token_file(where: Path, mode: int = 0o600) -> Path:
    path = where / "console.tokens"
    path.write_text(f"# console tokens\nadmin {ADMIN}\nread {READ}\n")
    path.chmod(mode)
    return path


def console_daemon(
    make_daemon: DaemonFactory, where: Path, backend: str
) -> tuple[DaemonProcess, str]:
    port = free_port()
    config = {
        "engine": {"chunks": 8, "delay_ms": 300},
        "console": {"address": f"127.0.0.1:{port}", "token_file": str(token_file(where))},
    }
    return make_daemon(config, backend=backend), f"http://127.0.0.1:{port}"


async def _say(d: DaemonProcess, msg_id: str, text: str, sender: str = "+1") -> dict[str, Any]:
    async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c:
        await c.send(
            {
                "type": "inbound",
                "msg_id": msg_id,
                "sender_id": sender,
                "sender_name": "Ada Lovelace",
                "peer_kind": "dm",
                "text": text,
            }
        )
        with anyio.fail_after(30):
            while (frame := await c.recv())["type"] != "deliver" or frame["status"] != "final":
                pass
        await c.send({"type": "delivered", "out_id": frame["out_id"]})
        return frame


def say(d: DaemonProcess, msg_id: str, text: str) -> dict[str, Any]:
    return anyio.run(_say, d, msg_id, text)


def op(d: DaemonProcess, name: str, **args: Any) -> Any:
    async def call() -> Any:
        async with await BrokerClient.connect(d.socket) as c:
            return await c.op(name, **args)

    return anyio.run(call)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = program("chromium", "chromium")
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        f"--user-data-dir={tmp_path / 'chromium'}",
        "--window-size=1280,900",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(program("chromedriver", "chromium-driver"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


class Pages:
    """The browser on the console: each page checked for console errors and saved."""

    def __init__(self, driver: Any, url: str, shots: Path) -> None:
        self.driver = driver
        self.url = url
        self.shots = shots
        shots.mkdir(parents=True, exist_ok=True)

    def open(self, path: str) -> None:
        self.driver.get(self.url + path)
        self.settle()

    def settle(self) -> None:
        from selenium.webdriver.support.ui import WebDriverWait

        WebDriverWait(self.driver, 20).until(
            lambda d: d.execute_script("return document.readyState") == "complete"
        )

    def arrive(self, part: str) -> None:
        """After a click: wait for the next page's address, then for it to load."""
        from selenium.webdriver.support.ui import WebDriverWait

        WebDriverWait(self.driver, 20).until(lambda d: part in d.current_url)
        self.settle()

    def check(self, name: str) -> Path:
        """No console error since the last check; the page saved as `name`.png."""
        errors = [e for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == [], errors
        shot = self.shots / f"{name}.png"
        assert self.driver.save_screenshot(str(shot))
        return shot

    def text(self) -> str:
        return str(self.driver.find_element("tag name", "body").text)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_console_in_a_real_browser(
    make_daemon: DaemonFactory, browser: Any, tmp_path: Path, backend: str
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    d, url = console_daemon(make_daemon, tmp_path, backend)
    first = say(d, "m1", "hello console")
    label = str(first["session"])
    say(d, "m2", "a second message")
    turns = op(d, "session.show", session=label)["turns"]
    fork = op(d, "session.fork", turn=turns[0]["id"])["label"]
    pages = Pages(browser, url, tmp_path / "screenshots")

    # The first page, opened with ?token=, sets the cookie and drops the token from the address.
    pages.open(f"/?token={ADMIN}")
    assert "token=" not in browser.current_url
    body = pages.text()
    assert label in body and "Ada Lovelace" in body and "sms" in body
    pages.check("sessions")
    # The keyboard's first stop is the skip link.
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    assert browser.switch_to.active_element.text == "Skip to the content"

    browser.find_element(By.LINK_TEXT, label).click()
    pages.arrive("/session?")
    forked = browser.find_elements(By.CSS_SELECTOR, "ul.tree .fork a")
    assert [a.text for a in forked] == [fork]
    rows = browser.find_elements(By.CSS_SELECTOR, "ul.tree li.turn")
    assert len(rows) == 2 and "head" in rows[-1].text
    pages.check("session")

    # A turn streams into the open page as it runs.
    talker = threading.Thread(target=say, args=(d, "m3", STREAMED))
    talker.start()
    live = browser.find_element(By.ID, "live-text")
    WebDriverWait(browser, 20, poll_frequency=0.05).until(lambda _: live.text.strip())
    partial = live.text
    assert partial and STREAMED.startswith(partial.strip()) and partial.strip() != STREAMED
    pages.check("streaming")
    WebDriverWait(browser, 20).until(lambda _: live.text.strip() == STREAMED)
    WebDriverWait(browser, 20).until(
        lambda _: "ended" in browser.find_element(By.ID, "live-state").text
    )
    talker.join(30)

    browser.find_element(By.PARTIAL_LINK_TEXT, "hello console").click()
    pages.arrive("/turn?")
    assert "llm" in pages.text() and "hello console" in pages.text()
    pages.check("turn")

    pages.open("/ops")
    assert "Log tail" in pages.text() and "turn completed" in pages.text()
    pages.check("ops")

    # An action: fork at the head from the page; the ledger has the new session.
    pages.open(f"/session?s={label}")
    before = {row[0] for row in d.db().execute("SELECT label FROM sessions")}
    browser.find_elements(By.CSS_SELECTOR, "ul.tree button[value=fork]")[-1].click()
    pages.arrive("done=fork")
    after = {row[0] for row in d.db().execute("SELECT label FROM sessions")}
    (made,) = after - before
    assert browser.find_element(By.CSS_SELECTOR, "h1.label").text == made
    assert "Done: fork" in pages.text()
    with d.db() as db:
        assert db.execute(
            "SELECT parent_session FROM sessions WHERE label = ?", (made,)
        ).fetchone() == (label,)
    pages.check("after-fork")

    # On a phone: nothing wider than the screen.
    browser.set_window_size(390, 844)
    pages.open(f"/session?s={label}")
    overflow = browser.execute_script(
        "return document.documentElement.scrollWidth - window.innerWidth"
    )
    assert overflow <= 0
    pages.check("session-phone")
    pages.open("/")
    pages.check("sessions-phone")


def test_refusals_over_http(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    d, url = console_daemon(make_daemon, tmp_path, "trio")
    label = str(say(d, "m1", "private words")["session"])
    with httpx.Client(base_url=url, timeout=10) as http:
        for headers in ({}, {"authorization": "Bearer not-a-token-of-this-console"}):
            for path in ("/", f"/session?s={label}", "/ops", "/static/console.css"):
                answer = http.get(path, headers=headers)
                assert answer.status_code == 401, path
                assert label not in answer.text and "private" not in answer.text
        assert http.get(f"/?token={READ[:-1]}").status_code == 401
        read = {"authorization": f"Bearer {READ}"}
        assert http.get(f"/session?s={label}", headers=read).status_code == 200
        page = http.get(f"/session?s={label}", headers=read).text
        assert "private words" in page and "Fork here" not in page  # read: no action
        assert http.get("/session?s=dm:ent_nobody", headers=read).status_code == 404
        assert http.get("/turn?s=dm:ent_nobody&t=x", headers=read).status_code == 404
        sessions = op(d, "sessions.list")
        for action in ("fork", "reset", "compact", "cancel", "erase"):
            answer = http.post(
                "/action",
                headers=read,
                data={"action": action, "session": label, "turn": "x", "item": "y"},
            )
            assert answer.status_code == 403, action
        admin = {"authorization": f"Bearer {ADMIN}"}
        foreign = http.post(
            "/action",
            headers={**admin, "origin": "http://elsewhere.example"},
            data={"action": "reset", "session": label},
        )
        assert foreign.status_code == 403
        assert op(d, "sessions.list") == sessions  # nothing changed
        bad = http.post("/action", headers=admin, data={"action": "fork", "turn": "nope"})
        assert bad.status_code == 404
        # Erasure: offered to admin alone, confirmed by the entity's id, then gone.
        entity = label.split(":", 1)[1]
        assert "Erase this person" in http.get(f"/session?s={label}", headers=admin).text
        assert "Erase this person" not in page
        erase = {"action": "erase", "session": label, "entity": entity}
        wrong = http.post("/action", headers=admin, data={**erase, "confirm": "ent_other"})
        assert wrong.status_code == 400
        assert op(d, "sessions.list") == sessions
        done = http.post("/action", headers=admin, data={**erase, "confirm": entity})
        assert done.status_code == 303 and done.headers["location"] == "/?done=erased"
        assert label not in {s["label"] for s in op(d, "sessions.list")}
        assert http.get(f"/session?s={label}", headers=admin).status_code == 404


@pytest.mark.parametrize("problem", ["readable", "missing", "address"])
def test_start_refused(short_tmp: Path, problem: str) -> None:
    tokens = token_file(short_tmp, 0o644 if problem == "readable" else 0o600)
    if problem == "missing":
        tokens.unlink()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1] if problem == "address" else free_port()
        config = short_tmp / "broker.toml"
        write_config(
            config,
            {
                "socket_path": str(short_tmp / "b.sock"),
                "ledger": {"path": str(short_tmp / "ledger.db")},
                "console": {"address": f"127.0.0.1:{port}", "token_file": str(tokens)},
            },
        )
        done = brokerd_once(config)
    assert done.returncode == 78, done.stderr
    key = "console.address" if problem == "address" else "console.token_file"
    assert key in done.stderr
    assert ADMIN not in done.stderr and "Traceback" not in done.stderr
    assert not (short_tmp / "b.sock").exists()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_turn_page_shows_its_files_with_diffs(
    make_daemon: DaemonFactory, tmp_path: Path, anyio_backend: str
) -> None:
    from tests.integration.scripted import Scripted

    port = free_port()
    console = {"address": f"127.0.0.1:{port}", "token_file": str(token_file(tmp_path))}
    s = Scripted(make_daemon, tmp_path, anyio_backend, {"console": console})

    def wrote(text: str) -> str:
        return "event file " + json.dumps({"path": "notes.md", "op": "write", "content": text})

    first = await s.say(wrote("alpha\nkept\n"), "m1")
    await s.say(wrote("beta\nkept\n"), "m2")
    label = str(first["session"])
    head = (await s.op("session.show", session=label))["head"]
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        answer = await http.get(
            "/turn", params={"s": label, "t": head}, headers={"authorization": f"Bearer {READ}"}
        )
    assert answer.status_code == 200
    page = answer.text
    assert "notes.md" in page
    assert '<span class="del">-alpha</span>' in page and '<span class="add">+beta</span>' in page
    assert " kept" in page  # the line both versions share, as context
