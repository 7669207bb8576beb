"""`JobsServiceHandlers`: the Connect JobsService, built once from the method table, for
a service that handles every method the same way (the gateway checks access and
routes; a queue core checks the internal call and runs CoreRpc).

The generated `JobsServiceASGIApplication` binds `service.<method>` for each path; this
class has one handler per table row, each calling `self.dispatch(method, request, ctx)`
(unary) or `self.dispatch_stream(method, request, ctx)` (Watch) with the row itself, so
a subclass reads the row's action, routing key and name without a lookup. Any failure
leaves as a ConnectError (JobsErrors by their §5.3 code), never as Connect's `unknown`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from loam_common.api.methods import JOBS_METHODS, Method
from loam_common.connect_errors import to_connect


class TableDispatch:
    """What a subclass of `JobsServiceHandlers` writes."""

    async def dispatch(self, method: Method, request: Any, ctx: Any) -> Any:
        raise NotImplementedError

    def dispatch_stream(self, method: Method, request: Any, ctx: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def _unary(method: Method) -> Callable[..., Any]:
    async def handler(self: TableDispatch, request: Any, ctx: Any) -> Any:
        try:
            return await self.dispatch(method, request, ctx)
        except Exception as e:  # noqa: BLE001 - every failure gets its Connect code
            raise to_connect(e) from e

    return handler


def _streaming(method: Method) -> Callable[..., Any]:
    async def handler(self: TableDispatch, request: Any, ctx: Any) -> AsyncIterator[Any]:
        try:
            async for item in self.dispatch_stream(method, request, ctx):
                yield item
        except Exception as e:  # noqa: BLE001
            raise to_connect(e) from e

    return handler


def _handlers() -> dict[str, Any]:
    out: dict[str, Any] = {"__module__": __name__, "__doc__": __doc__}
    for method in JOBS_METHODS:
        handler = _streaming(method) if method.streaming else _unary(method)
        handler.__name__ = method.name
        handler.__qualname__ = f"JobsServiceHandlers.{method.name}"
        handler.__doc__ = method.doc
        out[method.name] = handler
    return out


#: Implements the generated `JobsService` Protocol: one handler per row of the table.
JobsServiceHandlers: type[TableDispatch] = type("JobsServiceHandlers", (TableDispatch,), _handlers())
