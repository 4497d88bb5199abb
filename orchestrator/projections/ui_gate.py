"""What `nestor ui`'s MLflow server lets through: a token, and reads only.

`nestor ui` binds the loopback interface, but on a login node every user shares
it: MLflow's server alone would let any of them read the runs, upload files
into the run directory (``PUT .../mlflow-artifacts/artifacts/...``, written as
the run's owner) and delete runs. So the server runs MLflow's own app behind
this gate, loaded the way MLflow loads its basic-auth app (``mlflow server
--app-name nestor-ui``: an ``mlflow.app`` entry point naming :func:`create_app`):

- **a token per session**: `nestor ui` draws one and passes it in the server's
  environment (readable by its user alone), and prints it in the link it shows.
  The first request carrying it (``?nestor_token=...``) is answered with a
  cookie and redirected to the same page without it (the token stays out of the
  browser's history); later requests carry the cookie, or a client sends
  ``Authorization: Bearer <token>`` (``MLFLOW_TRACKING_TOKEN`` does). Anything
  else is refused with 401; ``/health`` alone answers everyone (it says nothing).
- **reads only**, unless `nestor ui --allow-writes`: GET and HEAD, and POST to
  the search endpoints the UI reads through (MLflow 3.17's GraphQL
  "mutations" are searches too); every other method and POST is refused with 403.

A pure ASGI wrapper: it sees each request's method, path, query and headers,
and never its body.
"""

from __future__ import annotations

import hmac
import json
import os
import re
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

TOKEN_ENV = "NESTOR_UI_TOKEN"  # the session's token; unset: no token asked
WRITES_ENV = "NESTOR_UI_WRITES"  # "1": writes let through (nestor ui --allow-writes)
COOKIE_ENV = "NESTOR_UI_COOKIE"  # the cookie's name: one per port, so two UIs coexist
TOKEN_PARAM = "nestor_token"
ENTRY_POINT = "nestor-ui"  # the mlflow.app entry point's name (pyproject.toml)
OPEN = frozenset({"/health"})
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# The POSTs that only read: MLflow's search endpoints (REST and the UI's ajax-api,
# any API version) and its GraphQL endpoint.
READ_POSTS = re.compile(
    r"^/(ajax-)?api/[23]\.0/mlflow/("
    r"runs/search|experiments/search|experiments/search-datasets|logged-models/search"
    r"|datasets/search|traces/search|traces/batchGetInfos|traces/metrics"
    r"|registered-models/get-latest-versions|model-versions/search"
    r"|registered-models/search|issues/search|prompt-optimization/jobs/search"
    r")$|^/graphql$")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def reads_only(method: str, path: str) -> bool:
    """Whether a request of ``method`` on ``path`` only reads MLflow's store."""
    return method in READ_METHODS or (method == "POST" and bool(READ_POSTS.match(path)))


class Gate:
    """MLflow's ASGI app behind a token and, unless ``writes``, a read-only rule."""

    def __init__(self, app: App, token: str | None, writes: bool,
                 cookie: str = "nestor_ui") -> None:
        self.app, self.token, self.writes, self.cookie = app, token or None, writes, cookie

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)  # lifespan
            return
        path, method = scope.get("path", ""), scope.get("method", "GET")
        if self.token and path not in OPEN:
            offered = self._offered(scope)
            if offered == "query":
                await self._welcome(scope, send)
                return
            if offered is None:
                await _refuse(scope, send, 401, "UNAUTHENTICATED",
                              "open the link `nestor ui` printed (it carries this"
                              " session's token), or send Authorization: Bearer <token>")
                return
        if not self.writes and scope["type"] == "http" and not reads_only(method, path):
            await _refuse(scope, send, 403, "PERMISSION_DENIED",
                          f"nestor ui serves this store read-only ({method} {path} would"
                          " change it); start it with --allow-writes to change runs")
            return
        await self.app(scope, receive, send)

    def _offered(self, scope: Scope) -> str | None:
        """Where the request carries the right token ("query", "header", "cookie"),
        None if it carries none or a wrong one."""
        headers = _headers(scope)
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer ") and self._right(auth[7:].strip()):
            return "header"
        for part in headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == self.cookie and self._right(value):
                return "cookie"
        query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if any(self._right(value) for value in query.get(TOKEN_PARAM, [])):
            return "query"
        return None

    def _right(self, offered: str) -> bool:
        return bool(self.token) and hmac.compare_digest(offered.encode(), self.token.encode())

    async def _welcome(self, scope: Scope, send: Send) -> None:
        """The link's first request: the cookie, and the same page without the token
        (the browser keeps the link's #fragment, where MLflow's UI routes)."""
        query = [(k, v) for k, v in urllib.parse.parse_qsl(
            scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
            if k != TOKEN_PARAM]
        where = scope.get("root_path", "") + scope.get("path", "/")
        if query:
            where += "?" + urllib.parse.urlencode(query)
        cookie = (f"{self.cookie}={self.token}; Path=/; HttpOnly; SameSite=Strict")
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "http.response.start", "status": 303, "headers": [
            (b"location", where.encode("latin-1")), (b"set-cookie", cookie.encode("latin-1")),
            (b"cache-control", b"no-store"), (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1")
            for k, v in scope.get("headers", [])}


async def _refuse(scope: Scope, send: Send, status: int, code: str, message: str) -> None:
    if scope["type"] != "http":
        await send({"type": "websocket.close", "code": 1008})
        return
    body = json.dumps({"error_code": code, "message": message}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def create_app() -> App:
    """MLflow's server app behind the gate: the ``mlflow.app`` entry point's factory,
    called in each of the server's workers, configured by their environment."""
    from mlflow.server.fastapi_app import app

    return Gate(app, os.environ.get(TOKEN_ENV), os.environ.get(WRITES_ENV) == "1",
                os.environ.get(COOKIE_ENV) or "nestor_ui")
