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


def test_a_flink_jar_deployment_is_a_valid_flink_deployment():
    d = k8s.flink_deployment("Acme", "Counter", kind="jar", artifact="ab" * 32 + "/counter.jar",
                             entry_class="loam.KeyedCounter", args=["--tag", "v1"], parallelism=2,
                             savepoint="s3://x/sp-1", savepoint_interval_s=600)  # fmt: skip
    assert (d["apiVersion"], d["kind"]) == ("flink.apache.org/v1beta1", "FlinkDeployment")
    job = d["spec"]["job"]
    assert (
        job["jarURI"] == "local:///opt/flink/usrlib/counter.jar" and job["entryClass"] == "loam.KeyedCounter"
    )
    assert (job["upgradeMode"], job["state"], job["initialSavepointPath"]) == (
        "savepoint",
        "running",
        "s3://x/sp-1",
    )
    assert d["spec"]["flinkConfiguration"]["kubernetes.operator.periodic.savepoint.interval"] == "600s"
    assert d["metadata"]["name"] == "flink-acme-counter" and d["metadata"]["namespace"] == "loam-acme"


def test_flink_sql_and_pyflink_run_through_the_python_driver():
    sql = k8s.flink_deployment("acme", "counts", kind="sql", artifact="cd" * 32 + "/counts.sql")
    assert sql["spec"]["job"]["entryClass"] == "org.apache.flink.client.python.PythonDriver"
    assert sql["spec"]["job"]["args"][-2:] == ["--script", "/opt/flink/usrlib/counts.sql"]
    py = k8s.flink_deployment("acme", "py", kind="python", artifact="ef" * 32 + "/job.py", args=["--x"])
    assert py["spec"]["job"]["args"] == ["-py", "/opt/flink/usrlib/job.py", "--x"]


@pytest.mark.parametrize("mode", ["savepoint", "last-state", "stateless"])
def test_each_upgrade_mode_is_the_operators_own(mode):
    d = k8s.flink_deployment("acme", "c", kind="jar", artifact="ab" * 32 + "/c.jar", upgrade_mode=mode)
    assert d["spec"]["job"]["upgradeMode"] == mode  # and the CRD schema accepted it


def test_each_flink_action_maps_onto_a_valid_operator_resource():
    d = k8s.flink_deployment("acme", "c", kind="jar", artifact="ab" * 32 + "/c.jar")
    snap = k8s.flink_action(d, "savepoint", snapshot_id="01JSNAP")
    assert (
        snap["kind"] == "FlinkStateSnapshot" and snap["spec"]["jobReference"]["name"] == d["metadata"]["name"]
    )
    assert k8s.flink_action(d, "suspend")["spec"]["job"]["state"] == "suspended"
    assert k8s.flink_action(d, "resume")["spec"]["job"]["state"] == "running"
    v2 = k8s.flink_deployment("acme", "c", kind="jar", artifact="ab" * 32 + "/c2.jar")["spec"]["job"]
    up = k8s.flink_action(d, "upgrade", job=v2)
    assert up["spec"]["job"]["jarURI"].endswith("/c2.jar") and up["spec"]["job"]["upgradeMode"] == "savepoint"
    back = k8s.flink_action(up, "rollback", job=d["spec"]["job"], savepoint="s3://x/sp-7")
    assert back["spec"]["job"]["jarURI"].endswith("/c.jar")
    assert (back["spec"]["job"]["initialSavepointPath"], back["spec"]["job"]["savepointRedeployNonce"]) == (
        "s3://x/sp-7",
        1,
    )
    assert set(k8s.FLINK_ACTIONS) >= {
        "deploy",
        "savepoint",
        "upgrade",
        "rollback",
        "suspend",
        "resume",
        "cancel",
    }


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda d: d["spec"]["job"].__setitem__("upgradeMode", "yolo"), "spec.job.upgradeMode"),
        (lambda d: d["spec"]["job"].__setitem__("state", "paused"), "spec.job.state"),
        (lambda d: d["spec"].__setitem__("flinkVersion", "v0_9"), "spec.flinkVersion"),
        (lambda d: d["spec"]["job"].__setitem__("parallelism", "two"), "spec.job.parallelism"),
    ],
)
def test_the_operator_crd_refuses_a_malformed_flink_deployment(mutate, where):
    d = copy.deepcopy(k8s.flink_deployment("acme", "c", kind="jar", artifact="ab" * 32 + "/c.jar"))
    mutate(d)
    with pytest.raises(ValueError) as bad:
        k8s.validate_custom(d)
    assert f"at {where}:" in str(bad.value)
