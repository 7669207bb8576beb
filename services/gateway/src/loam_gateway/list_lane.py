"""The console's job list, served without FastAPI's per-request work.

`GET /v1/queues/{queue}/jobs` is what the console asks for on every page of every job
list, and its bar is 50 ms p95 over 1,000,000 jobs. Profiled under `loam dev`, most of
a page's server CPU was not the list (one index scan and 50 reads, then 50 rows mapped)
but what FastAPI does around it: routing through every route, the middleware stack,
the dependency and parameter machinery, and a JSON encoder walking the page. This lane,
like the unary lane for Connect calls (unary_lane.py), takes the common request only:

- the same route and behaviour: the caller checked by the same `Access.check` (the
  `query` row of the method table: a `jobs:read` token may list), the request guard in
  front of it as in front of everything (app.py), the same Router call, the same rows
  (`rest.job_row`, with the namespace's redaction), and errors in the same shape;
- a request it cannot parse exactly as FastAPI would accept it (an unknown state, a
  page size out of range, a repeated scalar parameter, an odd path) goes to FastAPI,
  untouched, which answers it (and its error) as before; so does any method but GET.

The page is encoded once by msgspec, whose encoder turns the rows' dicts, lists and
ints into JSON several times faster than a generic one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, get_args
from urllib.parse import parse_qsl

import msgspec
from connectrpc.errors import ConnectError
from pydantic_core import to_json

from loam_common.api.methods import operation
from loam_common.connect_errors import to_connect
from loam_common.errors import JobsError
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.jobs import states as S
from loam_gateway.rest import JobListView, StateName, job_row

PREFIX = "/v1/queues/"
SUFFIX = "/jobs"
_STATES = {name: S.BY_NAME[name] for name in get_args(StateName)}
_VIEWS = frozenset(get_args(JobListView))
_SCALARS = {"name": 256, "page_token": 4096}  # max length, as the route declares them
_HEADERS = [(b"content-type", b"application/json")]
_QUERY = operation("query")

log = logging.getLogger("loam.gateway")


class JobListLane:
    """`await lane(scope, receive, send)` serves the request and returns True, or
    returns False before answering anything when it is not the common shape."""

    def __init__(self, state: Any, error_json: Callable[[ConnectError], Any]) -> None:
        self.state = state  # the app's state: its access, router and redaction, as the routes read them
        self.error_json = error_json  # the app's one error shape
        self.encode = msgspec.json.Encoder().encode

    async def __call__(self, scope: dict, receive: Any, send: Any) -> bool:
        path = scope["path"]
        if scope["method"] != "GET" or not (path.startswith(PREFIX) and path.endswith(SUFFIX)):
            return False
        queue = path[len(PREFIX) : -len(SUFFIX)]
        if not queue or "/" in queue:
            return False
        request = _parse(queue, scope.get("query_string", b""))
        if request is None:
            return False
        req, summary = request
        state = self.state
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            p = await state.access.check(headers, _QUERY)
            r = await state.router.call(p.namespace, "query", req)
            rules = state.redaction
            redact = rules.for_namespace(p.namespace) if rules is not None else None
            page = {
                "jobs": [job_row(j, redact, summary) for j in r.jobs],
                "next_page_token": r.next_page_token,
            }
            try:
                body = self.encode(page)
            except UnicodeEncodeError:  # a stored payload with a lone surrogate: escaped as the routes do
                body = to_json(page)
            status = 200
        except Exception as e:  # noqa: BLE001 - every failure is answered as the routes answer it
            if not isinstance(e, ConnectError | JobsError):
                log.exception("unexpected error listing jobs of %s", queue)
            response = self.error_json(e if isinstance(e, ConnectError) else to_connect(e))
            status, body = response.status_code, bytes(response.body)
        await send({"type": "http.response.start", "status": status,
                    "headers": [*_HEADERS, (b"content-length", b"%d" % len(body))]})  # fmt: skip
        await send({"type": "http.response.body", "body": body, "more_body": False})
        return True


def _parse(queue: str, query_string: bytes) -> tuple[J.QueryRequest, bool] | None:
    """The QueryRequest and the summary flag of a query string FastAPI would accept as
    it is; None for anything else (FastAPI then answers it)."""
    try:
        pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True, strict_parsing=False)
    except ValueError:
        return None
    states: list[int] = []
    seen: dict[str, str] = {}
    for key, value in pairs:
        if key == "state":
            st = _STATES.get(value)
            if st is None:
                return None
            states.append(st)
        elif key in ("name", "page_token", "page_size", "view"):
            if key in seen:  # FastAPI takes the last of a repeated scalar: leave it to FastAPI
                return None
            seen[key] = value
    for key, limit in _SCALARS.items():
        if len(seen.get(key, "")) > limit:
            return None
    size = seen.get("page_size", "0")
    if not (size.isascii() and size.isdigit() and len(size) <= 4 and int(size) <= 1000):
        return None
    view = seen.get("view", "full")
    if view not in _VIEWS:
        return None
    try:
        req = J.QueryRequest(queue=queue, states=states, name=seen.get("name", ""), page_size=int(size),
                             page_token=seen.get("page_token", ""))  # fmt: skip
    except ValueError:  # a string protobuf refuses (a lone surrogate): FastAPI's path answers it
        return None
    return req, view == "summary"
