"""`loam.resonate(group=...)`: a Resonate client (the stock `resonate-sdk`) pointed at
Loam's durable endpoint. It fills in the URL, token and namespace from the arguments or
$LOAM_URL / $LOAM_TOKEN / $LOAM_NAMESPACE, and adds nothing to Resonate's API: register,
run, rpc, ctx and retry policies are Resonate's own.

The endpoint is `<LOAM_URL>/resonate`; on a dev server without auth a namespace other
than the default one is chosen with the `/ns/<ns>` prefix, with a token the token
names it. `resonate-sdk` is not a dependency of `loam`: install it to use this.
"""

from __future__ import annotations

import os
from typing import Any

from loam.client import DEFAULT_URL, env_url

DURABLE_PATH = "/resonate"


def durable_url(url: str | None = None, namespace: str | None = None) -> str:
    """The Resonate base URL of a Loam server (`.../resonate`, `/ns/<ns>` first if set)."""
    base = (url or env_url() or DEFAULT_URL).rstrip("/")
    ns = namespace if namespace is not None else os.environ.get("LOAM_NAMESPACE") or None
    return base + (f"/ns/{ns}" if ns else "") + DURABLE_PATH


def resonate(
    group: str = "default",
    *,
    url: str | None = None,
    token: str | None = None,
    namespace: str | None = None,
    **options: Any,
) -> Any:
    """`Resonate(url=<loam>/resonate, token=$LOAM_TOKEN, group=group, **options)`.

    Like `Resonate(...)` itself it needs a running event loop (call it inside async
    code) unless `autostart=False` is passed."""
    try:
        from resonate.resonate import Resonate
    except ImportError as e:  # pragma: no cover - depends on the user's environment
        raise ImportError("loam.resonate needs the Resonate SDK: pip install resonate-sdk") from e
    token = token if token is not None else os.environ.get("LOAM_TOKEN") or None
    return Resonate(url=durable_url(url, namespace), token=token, group=group, **options)
