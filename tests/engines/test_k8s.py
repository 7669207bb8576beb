"""The Kubernetes path on paper: the resources the runner would apply in cloud mode are
well-formed client models, and a SparkSubmit run's SparkApplication conforms to the
Kubeflow Spark Operator's CRD schema kept in the repo."""

from __future__ import annotations

import copy

import pytest

from loam_engines import k8s


def test_a_namespace_sail_in_kubernetes_cluster_mode():
    resources = k8s.sail_manifests("Acme.prod", image="lakehq/sail:0.7.2")
    kinds = [r["kind"] for r in resources]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "Deployment", "Service"]
    assert {r["metadata"]["namespace"] for r in resources} == {"loam-acme-prod"}
    deployment = resources[3]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SAIL_MODE"] == "kubernetes-cluster"
    assert env["SAIL_KUBERNETES__NAMESPACE"] == "loam-acme-prod"
    assert container["ports"][0]["containerPort"] == 15002
    assert (
        deployment["spec"]["selector"]["matchLabels"] == deployment["spec"]["template"]["metadata"]["labels"]
    )
    service = resources[4]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == resources[0]["metadata"]["name"]


def test_a_spark_submit_run_is_a_valid_spark_application():
    app = k8s.spark_application("acme", "01JABCDEF", "s3a://loam-artifacts/acme/wc.py", args=["2026-12-01"],
                                conf={"spark.sql.shuffle.partitions": "8"}, retries=2)  # fmt: skip
    assert app["kind"] == "SparkApplication"
    assert app["spec"]["type"] == "Python"
    assert app["metadata"]["name"] == "run-01jabcdef"
    k8s.validate_custom(app)  # the same check spark_application ran


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda a: a["spec"].pop("mainApplicationFile"), "spec"),
        (lambda a: a["spec"].__setitem__("type", "Perl"), "spec.type"),
        (lambda a: a["spec"]["executor"].__setitem__("instances", "two"), "spec.executor.instances"),
    ],
)
def test_the_crd_schema_refuses_a_malformed_spark_application(mutate, where):
    app = copy.deepcopy(k8s.spark_application("acme", "r1", "local:///opt/job.py"))
    mutate(app)
    with pytest.raises(ValueError) as bad:
        k8s.validate_custom(app)
    assert f"at {where}:" in str(bad.value)


def test_names_become_dns_labels():
    assert k8s.k8s_name("sail", "Team_A:prod@eu") == "sail-team-a-prod-eu"
    assert len(k8s.k8s_name("x" * 200)) == 63
