"""/metrics with auth on: a namespace's token sees only its own namespace's series (the
store-derived ones and this process's histograms alike); a token with the deployment's
admin scope sees every namespace."""

from __future__ import annotations

from gateway_kit import JSON, SVC, bearer

from loam_common import auth, metrics


def namespaces_in(text: str) -> set[str]:
    return {dict(labels).get("ns") for (_name, labels) in metrics.parse(text)} - {None}


async def test_metrics_never_cross_namespaces(http_auth, token):
    alpha = await token("alpha", auth.ENQUEUE, auth.CONSUME, auth.ADMIN)
    beta = await token("beta", auth.ENQUEUE, auth.ADMIN)
    operator = await token("ops", auth.DEPLOYMENT_ADMIN)
    r = await http_auth.post(SVC + "Enqueue", json={"queue": "q", "task": {"name": "t"}},
                             headers={**JSON, **bearer(alpha)})  # fmt: skip
    assert r.status_code == 200, r.text
    r = await http_auth.post(SVC + "Lease", json={"queues": ["q"], "worker": "w", "max": 1},
                             headers={**JSON, **bearer(alpha)})  # fmt: skip
    assert r.status_code == 200 and r.json()["leases"], r.text  # observes lease latency in ns alpha
    await http_auth.post(
        SVC + "Enqueue", json={"queue": "q", "task": {"name": "t"}}, headers={**JSON, **bearer(beta)}
    )

    seen_by_beta = (await http_auth.get("/metrics", headers=bearer(beta))).text
    assert namespaces_in(seen_by_beta) == {"beta"}
    assert 'ns="alpha"' not in seen_by_beta and "loam_jobs_enqueued_total" in seen_by_beta
    seen_by_alpha = (await http_auth.get("/metrics", headers=bearer(alpha))).text
    assert "alpha" in namespaces_in(seen_by_alpha) and "beta" not in namespaces_in(seen_by_alpha)
    assert "loam_jobs_lease_latency_seconds_bucket" in seen_by_alpha
    assert {"alpha", "beta"} <= namespaces_in(
        (await http_auth.get("/metrics", headers=bearer(operator))).text
    )
    r = await http_auth.get("/metrics", headers=bearer(await token("beta", auth.ENQUEUE)))
    assert r.status_code == 403  # neither the namespace's admin nor the deployment's
    assert (await http_auth.get("/metrics")).status_code == 401
