"""schemathesis against `/openapi.json` of a running `loam dev`: for every REST
operation, generated requests (valid and invalid) never get a 5xx, and every response
is documented: its status, content type and body schema. Bounded: a few examples per
operation and mode, well under a minute in all.

The operations are driven with hypothesis directly (schemathesis' lazy pytest loader
does not run on pytest 9)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES = {GenerationMode.POSITIVE: 12, GenerationMode.NEGATIVE: 6}


def operations(url: str):
    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    return [result.ok() for result in schema.get_all_operations()]


@pytest.mark.timeout(240)  # about 60 operations, a few examples each: minutes on a loaded machine
@pytest.mark.parametrize("mode", list(EXAMPLES), ids=lambda m: m.value)
def test_rest_api_conforms(dev_server, mode):
    ops = operations(dev_server.url)
    assert len(ops) >= 15, [op.label for op in ops]
    failures: list[str] = []
    for op in ops:

        @given(case=op.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES[mode], deadline=None, suppress_health_check=list(HealthCheck),
                  derandomize=True, database=None)  # fmt: skip
        def run(case):
            case.call_and_validate(checks=CHECKS, headers={"x-loam-namespace": "fuzz"})

        try:
            run()
        except Unsatisfiable:
            continue  # negative mode: nothing invalid to say (e.g. only free-form string paths)
        except Exception as e:  # noqa: BLE001 - collect every operation's failure, then report
            failures.append(f"{op.label}: {e}")
    assert not failures, "\n\n".join(failures)
