"""Type and size of a linked file from its HTTP server, within a bound.

An attachment that arrives as a bare URL (XMPP out-of-band data) says neither
its type nor its size; the file's server usually does, in the headers of a
HEAD (or of a one-byte ranged GET where HEAD is refused or says no length).

The probe never costs a message more than `bound_s` (all its files are asked at once,
under one deadline), and never drops or alters its text: a timeout, a refused
connection or an HTTP error leaves the attachment with what the message said, logged
once per file at info. A host that timed out or refused the connection is not asked
again for `COOLDOWN_S`, so a catch-up of many links to a dead host pays the bound
once. Only http(s) URLs are asked, with HEAD or a one-byte range, so the body is never
downloaded; a probe reaches wherever its URL points, from the adapter's host, and
`bound_s = 0` turns it off where that must not be.

What the message states wins; the server's Content-Type comes next (but for the
generic application/octet-stream), then the type of the name's extension. A size is
what the message or the server stated (Content-Length of an unencoded answer, the
total of a Content-Range), else null: never a made-up number.
"""

from __future__ import annotations

import logging
from typing import Any, Self
from urllib.parse import urlsplit

import anyio
import httpx

from adapters.attachments import type_from_name

log = logging.getLogger("adapters.url_probe")

COOLDOWN_S = 60.0
GENERIC = "application/octet-stream"


class ProbeFailed(Exception):
    """The server answered, but not with the file."""


class Cooldown:
    """Hosts not to ask until a time (the clock is the caller's)."""

    def __init__(self, seconds: float = COOLDOWN_S) -> None:
        self.seconds = seconds
        self._until: dict[str, float] = {}

    def failed(self, host: str, now: float) -> None:
        self._until[host] = now + self.seconds

    def blocked(self, host: str, now: float) -> bool:
        until = self._until.get(host)
        if until is not None and until <= now:
            del self._until[host]
            return False
        return until is not None


def completed(file: dict[str, Any], served: tuple[str | None, int | None]) -> dict[str, Any]:
    """The attachment with its type and size from the best source that said them."""
    served_type, served_size = served
    if served_type == GENERIC:
        served_type = None
    url_path = urlsplit(file.get("url") or "").path
    guessed = type_from_name(file.get("name")) or type_from_name(url_path)
    return {
        **file,
        "type": file.get("type") or served_type or guessed,
        "size": file["size"] if file.get("size") is not None else served_size,
    }


def from_headers(response: httpx.Response) -> tuple[str | None, int | None]:
    """The type and size an answer states (ProbeFailed if it is not the file)."""
    if not response.is_success:
        raise ProbeFailed(f"HTTP {response.status_code}")
    headers = response.headers
    media_type = headers.get("content-type", "").partition(";")[0].strip().lower() or None
    size: int | None = None
    if response.status_code == 206:
        total = headers.get("content-range", "").rpartition("/")[2]
        size = int(total) if total.isdigit() else None
    elif "content-encoding" not in headers:
        length = headers.get("content-length", "")
        size = int(length) if length.isdigit() else None
    return media_type, size


class UrlProbe:
    """Fills in the type and size of attachments from their servers (module rules)."""

    def __init__(self, bound_s: float) -> None:
        self.bound_s = bound_s
        self.cooldown = Cooldown()
        self._http: httpx.AsyncClient | None = None

    async def __aenter__(self) -> Self:
        """Opens the HTTP client the probes share (none when probing is off)."""
        if self.bound_s > 0:
            self._http = httpx.AsyncClient(
                timeout=self.bound_s,  # fill()'s deadline is the real bound
                follow_redirects=True,
                max_redirects=3,
                headers={"Accept-Encoding": "identity"},  # the file's length, not a gzip's
            )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        http, self._http = self._http, None
        if http is not None:
            with anyio.move_on_after(2, shield=True):
                await http.aclose()

    async def fill(self, files: list[dict[str, Any]]) -> None:
        """Complete each attachment in place (within the bound, whatever happens)."""
        served: dict[int, tuple[str | None, int | None]] = {}
        asked = [i for i, file in enumerate(files) if self._worth_asking(file)]
        if asked and self._http is not None:
            with anyio.move_on_after(self.bound_s) as deadline:
                async with anyio.create_task_group() as tg:
                    for i in asked:
                        tg.start_soon(self._ask, self._http, files[i]["url"], i, served)
            if deadline.cancelled_caught:
                for i in asked:
                    if i not in served:
                        self._unanswered(files[i]["url"], f"no answer within {self.bound_s:g}s")
        for i, file in enumerate(files):
            files[i] = completed(file, served.get(i, (None, None)))

    def _worth_asking(self, file: dict[str, Any]) -> bool:
        url = file.get("url")
        if self.bound_s <= 0 or not isinstance(url, str):
            return False
        if file.get("type") is not None and file.get("size") is not None:
            return False
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False
        return not self.cooldown.blocked(parts.hostname, anyio.current_time())

    async def _ask(
        self,
        http: httpx.AsyncClient,
        url: str,
        index: int,
        served: dict[int, tuple[str | None, int | None]],
    ) -> None:
        try:
            response = await http.head(url)
            if response.status_code in (405, 501) or (
                response.is_success and not response.headers.get("content-length")
            ):
                async with http.stream("GET", url, headers={"Range": "bytes=0-0"}) as ranged:
                    response = ranged  # headers only: the body is never read
            served[index] = from_headers(response)
        except httpx.TransportError as exc:
            served[index] = (None, None)
            self._unanswered(url, str(exc) or type(exc).__name__)
        except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError, ValueError) as exc:
            served[index] = (None, None)  # a URL httpx cannot ask, an answer it cannot read
            log.info("attachment %s: not asked (%s); passed on without its size", url, exc)
        except ProbeFailed as exc:
            served[index] = (None, None)
            log.info("attachment %s: its server said %s; passed on without its size", url, exc)

    def _unanswered(self, url: str, reason: str) -> None:
        host = urlsplit(url).hostname or ""
        self.cooldown.failed(host, anyio.current_time())
        log.info(
            "attachment %s: %s; passed on without its size (%s not asked for %gs)",
            url,
            reason,
            host,
            self.cooldown.seconds,
        )
