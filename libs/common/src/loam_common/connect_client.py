"""The one way to make a JobsService client: the generated Connect client with the
settings every caller wants (no gzip on small messages, either way), and the exit-time
guard its HTTP library needs."""

from __future__ import annotations

import atexit
import time
from typing import Any

from loam_common.gen.loam.jobs.v1.jobs_connect import JobsServiceClient

_guarded = False


def _settle_http_threads() -> None:
    """pyqwest's tokio threads may still be dropping Python objects when the interpreter
    finalizes; a thread that then takes the GIL is killed mid-unwind and the process
    aborts (SIGABRT, about 1 exit in 6 here). A moment with the GIL released at exit lets
    them finish first."""
    time.sleep(0.02)


def jobs_client(url: str, **kwargs: Any) -> JobsServiceClient:
    global _guarded
    if not _guarded:
        atexit.register(_settle_http_threads)
        _guarded = True
    kwargs.setdefault("send_compression", None)
    kwargs.setdefault("accept_compression", ())
    return JobsServiceClient(url, **kwargs)
