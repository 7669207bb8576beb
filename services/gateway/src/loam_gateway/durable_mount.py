"""Durable mode inside the gateway: `durable_app(core, hub)` gives the `durable` argument
of `create_app`, the Resonate-protocol app (loam_durable) authenticated by the gateway's
own `Access`, so a Resonate SDK's token resolves to a namespace and actions exactly as a
Connect or REST call's does (`Authorization: Bearer` or the envelope's `head.auth`;
without auth, in dev on loopback, the `/ns/<ns>/` prefix or the default namespace)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from loam_durable.app import SCHEDULE, DurableApp, create_durable_app
from loam_durable.facade import DurableCore
from loam_durable.hub import Hub

from loam_gateway.connect import Access


def durable_app(core: DurableCore, hub: Hub) -> Callable[[Access], DurableApp]:
    def build(access: Access) -> DurableApp:
        async def authenticate(headers: Mapping[str, str], action: str) -> str:
            method = "resonate_schedule" if action == SCHEDULE else "resonate"
            return (await access.check(headers, method)).namespace

        return create_durable_app(core, hub, authenticate)

    return build
