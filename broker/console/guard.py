"""Who asks: the console's token check, in front of every page, file and action.

A request's token comes from `Authorization: Bearer`, from `?token=` (opening a
first page), or from the cookie that first page set. Without a token the
console knows, the answer is 401 and says nothing else. A first page opened
with `?token=` sets the cookie (HttpOnly, SameSite=Strict) and sends the
browser on to the same address without the token, so it stays in no history.
The role the token's line gave is left in the request's state for the pages.
"""

from __future__ import annotations

from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from broker.console.tokens import Tokens

COOKIE = "broker_console"


class TokenGuard:
    """An ASGI app that lets through only requests with a known token."""

    def __init__(self, app: ASGIApp, tokens: Tokens) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        header = request.headers.get("authorization", "")
        bearer = header[7:].strip() if header.lower().startswith("bearer ") else None
        query = request.query_params.get("token")
        token = bearer or query or request.cookies.get(COOKIE)
        role = self.tokens.role_of(token)
        if role is None:
            response: Response = Response(
                "401: this console needs a token\n",
                status_code=401,
                media_type="text/plain",
                headers={"www-authenticate": 'Bearer realm="brokerd console"'},
            )
            await response(scope, receive, send)
            return
        if query and request.method == "GET" and not bearer:
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(COOKIE, query, httponly=True, samesite="strict", path="/")
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["role"] = role
        await self.app(scope, receive, send)
