"""schemathesis stateful over `/openapi.json` of a running `loam dev`: sequences of REST
calls chained through the links schemathesis infers (a job enqueued, then read, retried,
removed; a schedule put, then read and deleted; ...), every response checked: never a
5xx, always a documented status, content type and body. Bounded (15 sequences of up to 6 calls)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = (not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance)


@pytest.mark.timeout(120)
def test_rest_call_sequences_conform(dev_server):
    schema = schemathesis.openapi.from_url(dev_server.url + "/openapi.json")
    base = schema.as_state_machine()
    steps: list[str] = []

    class Machine(base):  # type: ignore[valid-type,misc]
        def get_call_kwargs(self, case):
            return {"headers": {"x-loam-namespace": "stateful"}}

        def validate_response(self, response, case, additional_checks=(), **kwargs):
            steps.append(f"{case.method} {case.path}")
            case.validate_response(response, checks=CHECKS)

    Machine.run(settings=settings(max_examples=15, stateful_step_count=6, deadline=None, derandomize=True,
                                  database=None, suppress_health_check=list(HealthCheck)))  # fmt: skip
    # The chains reached past single calls: operations on things an earlier step made.
    print(f"\nstateful: {len(steps)} calls over {len(set(steps))} operations")
    assert len(steps) >= 15 and len(set(steps)) >= 5, steps
