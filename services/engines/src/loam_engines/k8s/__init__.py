"""The cloud path on paper: the Kubernetes resources the engine runner would apply in
cloud mode, built with the `kubernetes` client's models and checked before use.

- `sail_manifests(ns, ...)`: a namespace's Sail in `kubernetes-cluster` mode — a
  ServiceAccount, the Role and RoleBinding its driver needs to create worker pods, the
  server Deployment (`SAIL_MODE=kubernetes-cluster`, Sail's `kubernetes.*` settings) and
  a ClusterIP Service on Spark Connect's port, which the proxy would route the
  namespace's sessions to instead of a child process.
- `spark_application(ns, run, ...)`: a SparkSubmit run as a Kubeflow Spark Operator
  `SparkApplication` (sparkoperator.k8s.io/v1beta2), validated against the CRD's
  OpenAPI schema kept in `crds/` (`validate_custom`).
- `flink_deployment(ns, name, spec, ...)`: a Flink deployment as the Apache Flink
  Kubernetes Operator's `FlinkDeployment` (flink.apache.org/v1beta1, operator 1.15+) in
  application mode, and `flink_action(...)`: what each lifecycle action becomes there
  (`FLINK_ACTIONS` documents the mapping) — a patch of the FlinkDeployment, or a
  `FlinkStateSnapshot` for a savepoint. Both validated against the operator's CRDs kept
  in `crds/`.

Core resources are the client's typed models (`V1Deployment`, ...), whose constructors
refuse missing required fields; `to_dict` serialises them the way the API server reads
them. Nothing here talks to a cluster.
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from kubernetes import client as k

CRDS = Path(__file__).with_name("crds")
SPARK_CONNECT_PORT = 15002
SPARK_VERSION = "4.2.0"
_DNS_LABEL = re.compile(r"[^a-z0-9-]+")


def k8s_name(*parts: str, limit: int = 63) -> str:
    """A DNS-1123 label from Loam names (which allow `._:@` and upper case)."""
    name = _DNS_LABEL.sub("-", "-".join(parts).lower()).strip("-")
    return name[:limit].rstrip("-") or "loam"


def to_dict(obj: Any) -> dict:
    return k.ApiClient().sanitize_for_serialization(obj)


def _labels(ns: str, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/part-of": "loam", "app.kubernetes.io/component": component,
            "loam.dev/namespace": k8s_name(ns)}  # fmt: skip


def sail_manifests(
    ns: str,
    *,
    k8s_namespace: str | None = None,
    image: str = "lakehq/sail:0.7.2",
    memory: str = "2Gi",
    cpu: str = "1",
    session_timeout_s: int = 900,
) -> list[dict]:
    """The resources of one namespace's Sail server in kubernetes-cluster mode."""
    kns = k8s_namespace or k8s_name("loam", ns)
    name = k8s_name("sail", ns)
    labels = _labels(ns, "sail")
    meta = k.V1ObjectMeta(name=name, namespace=kns, labels=labels)
    account = k.V1ServiceAccount(api_version="v1", kind="ServiceAccount", metadata=meta)
    role = k.V1Role(
        api_version="rbac.authorization.k8s.io/v1", kind="Role", metadata=meta,
        rules=[k.V1PolicyRule(api_groups=[""], resources=["pods", "services", "configmaps"],
                              verbs=["create", "get", "list", "watch", "delete", "deletecollection"])],
    )  # fmt: skip
    binding = k.V1RoleBinding(
        api_version="rbac.authorization.k8s.io/v1", kind="RoleBinding", metadata=meta,
        role_ref=k.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=name),
        subjects=[k.RbacV1Subject(kind="ServiceAccount", name=name, namespace=kns)],
    )  # fmt: skip
    env = [
        k.V1EnvVar(name="SAIL_MODE", value="kubernetes-cluster"),
        k.V1EnvVar(name="SAIL_KUBERNETES__IMAGE", value=image),
        k.V1EnvVar(name="SAIL_KUBERNETES__NAMESPACE", value=kns),
        k.V1EnvVar(name="SAIL_KUBERNETES__WORKER_SERVICE_ACCOUNT_NAME", value=name),
        k.V1EnvVar(name="SAIL_KUBERNETES__DRIVER_POD_NAME",
                   value_from=k.V1EnvVarSource(field_ref=k.V1ObjectFieldSelector(field_path="metadata.name"))),
        k.V1EnvVar(name="SAIL_SPARK__SESSION_TIMEOUT_SECS", value=str(session_timeout_s)),
    ]  # fmt: skip
    container = k.V1Container(
        name="sail",
        image=image,
        args=["spark", "server", "--ip", "0.0.0.0", "--port", str(SPARK_CONNECT_PORT)],
        env=env,
        ports=[k.V1ContainerPort(name="spark-connect", container_port=SPARK_CONNECT_PORT)],
        resources=k.V1ResourceRequirements(
            requests={"cpu": cpu, "memory": memory}, limits={"memory": memory}
        ),
        readiness_probe=k.V1Probe(tcp_socket=k.V1TCPSocketAction(port=SPARK_CONNECT_PORT), period_seconds=2),
        security_context=k.V1SecurityContext(run_as_non_root=True, allow_privilege_escalation=False),
    )
    deployment = k.V1Deployment(
        api_version="apps/v1", kind="Deployment", metadata=meta,
        spec=k.V1DeploymentSpec(
            replicas=1,  # scaled to 0 when idle and to 1 on the first connection, by the runner
            selector=k.V1LabelSelector(match_labels=labels),
            template=k.V1PodTemplateSpec(
                metadata=k.V1ObjectMeta(labels=labels),
                spec=k.V1PodSpec(service_account_name=name, containers=[container]),
            ),
        ),
    )  # fmt: skip
    service = k.V1Service(
        api_version="v1", kind="Service", metadata=meta,
        spec=k.V1ServiceSpec(selector=labels, ports=[k.V1ServicePort(name="spark-connect", port=SPARK_CONNECT_PORT,
                                                                     target_port="spark-connect")]),
    )  # fmt: skip
    return [to_dict(x) for x in (account, role, binding, deployment, service)]


def spark_application(
    ns: str,
    run_id: str,
    main_file: str,
    *,
    args: list[str] | None = None,
    conf: dict[str, str] | None = None,
    k8s_namespace: str | None = None,
    image: str = f"apache/spark:{SPARK_VERSION}-python3",
    driver_memory: str = "1g",
    executor_memory: str = "1g",
    executors: int = 1,
    retries: int = 0,
) -> dict:
    """A SparkSubmit run as a SparkApplication; ValueError if the CRD's schema refuses it."""
    kns = k8s_namespace or k8s_name("loam", ns)
    labels = {**_labels(ns, "spark-submit"), "loam.dev/run": k8s_name(run_id)}
    meta = to_dict(k.V1ObjectMeta(name=k8s_name("run", run_id), namespace=kns, labels=labels))
    app = {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": meta,
        "spec": {
            "type": "Python",
            "pythonVersion": "3",
            "mode": "cluster",
            "image": image,
            "mainApplicationFile": main_file,
            "arguments": list(args or []),
            "sparkVersion": SPARK_VERSION,
            "sparkConf": dict(conf or {}),
            "restartPolicy": {"type": "OnFailure", "onFailureRetries": retries}
            if retries
            else {"type": "Never"},
            "driver": {
                "cores": 1,
                "memory": driver_memory,
                "labels": labels,
                "serviceAccount": k8s_name("spark", ns),
            },  # fmt: skip
            "executor": {"cores": 1, "instances": executors, "memory": executor_memory, "labels": labels},
        },
    }
    validate_custom(app)
    return app


@functools.cache
def _crd_schemas() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> the openAPIV3Schema of every CRD kept in crds/."""
    out = {}
    for path in sorted(CRDS.glob("*.yaml")):
        # libyaml's loader when present: the CRDs are 1.4 MB of YAML
        for crd in yaml.load_all(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            if not crd:
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                out[(f"{group}/{version['name']}", kind)] = version["schema"]["openAPIV3Schema"]
    return out


def validate_custom(obj: dict) -> None:
    """Check a custom resource against its CRD's schema; ValueError naming the first
    problem (its path in the object) if it does not conform."""
    schema = _crd_schemas().get((obj.get("apiVersion"), obj.get("kind")))
    if schema is None:
        raise ValueError(f"no CRD kept for {obj.get('apiVersion')}/{obj.get('kind')}")
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(obj), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = ".".join(str(p) for p in e.absolute_path) or "(root)"
        raise ValueError(f"{obj.get('kind')} does not match its CRD at {where}: {e.message}")


# -- Flink (the Apache Flink Kubernetes Operator, 1.15+) --------------------------------------
FLINK_API = "flink.apache.org/v1beta1"
# The newest Flink the 1.15 operator's CRD names; the local cluster runs 2.3 (the 2.x job API).
FLINK_K8S_VERSION = "v2_2"
FLINK_IMAGE = "flink:2.2"
USRLIB = "/opt/flink/usrlib"  # where the job's image (or an init container) puts the artifact
PYTHON_JAR = "local:///opt/flink/opt/flink-python-2.2.0.jar"
PYTHON_DRIVER = "org.apache.flink.client.python.PythonDriver"

# How each lifecycle action of loam_engines.flink is carried out by the operator.
FLINK_ACTIONS: dict[str, str] = {
    "deploy": "create the FlinkDeployment: spec.job (jarURI, entryClass, args, parallelism, "
    "initialSavepointPath when deploying from a savepoint), job.state running, upgradeMode savepoint",
    "savepoint": "create a FlinkStateSnapshot (spec.savepoint, jobReference = the FlinkDeployment); "
    "its status.path is the savepoint",
    "upgrade": "patch spec.job (and flinkConfiguration) with the new version: the operator stops the job "
    "with a savepoint and starts the new spec from it (upgradeMode savepoint), or cancels it and starts "
    "from the newest checkpoint in its HA metadata (last-state) or empty (stateless); "
    "kubernetes.operator.deployment.rollback.enabled rolls a version that does not become ready back by itself",
    "rollback": "patch spec.job back to the recorded version with job.initialSavepointPath = the named "
    "savepoint and savepointRedeployNonce bumped: the operator redeploys from that savepoint",
    "suspend": "patch job.state = suspended: the operator stops the job with a savepoint",
    "resume": "patch job.state = running: the operator restores from the last savepoint",
    "cancel": "delete the FlinkDeployment (the operator cancels the job; savepoints stay in the state "
    "store until their FlinkStateSnapshots are deleted)",
    "status": "read status.lifecycleState, status.jobStatus (state, jobId) and "
    "status.jobStatus.savepointInfo / the FlinkStateSnapshots",
    "periodic savepoints": "flinkConfiguration kubernetes.operator.periodic.savepoint.interval; retention "
    "by kubernetes.operator.savepoint.history.max.count / max.age",
}


def _flink_job(kind: str, artifact: str, entry_class: str | None, args: list[str], parallelism: int) -> dict:
    """spec.job of a jar, PyFlink or SQL job whose artifact sits in the image's usrlib."""
    file = artifact.rsplit("/", 1)[-1]
    if kind == "jar":
        job = {"jarURI": f"local://{USRLIB}/{file}", "args": list(args)}
        if entry_class:
            job["entryClass"] = entry_class
    elif kind == "python":
        job = {"jarURI": PYTHON_JAR, "entryClass": PYTHON_DRIVER, "args": ["-py", f"{USRLIB}/{file}", *args]}
    else:  # sql: Loam's SQL runner with the script, as the operator's SQL runner example does
        job = {"jarURI": PYTHON_JAR, "entryClass": PYTHON_DRIVER,
               "args": ["-py", f"{USRLIB}/sql_runner.py", "--script", f"{USRLIB}/{file}"]}  # fmt: skip
    job["parallelism"] = parallelism
    return job


def flink_deployment(
    ns: str,
    name: str,
    *,
    kind: str,
    artifact: str,
    entry_class: str | None = None,
    args: list[str] | None = None,
    parallelism: int = 1,
    config: dict[str, str] | None = None,
    savepoint: str | None = None,
    savepoint_interval_s: int = 0,
    upgrade_mode: str = "savepoint",
    k8s_namespace: str | None = None,
    image: str = FLINK_IMAGE,
    state_dir: str = "s3://loam-flink",
    jobmanager_memory: str = "1024m",
    taskmanager_memory: str = "2048m",
) -> dict:
    """A Loam Flink deployment as a FlinkDeployment in application mode; ValueError if the
    operator's CRD schema refuses it."""
    kns = k8s_namespace or k8s_name("loam", ns)
    labels = {**_labels(ns, "flink"), "loam.dev/deployment": k8s_name(name)}
    meta = to_dict(k.V1ObjectMeta(name=k8s_name("flink", ns, name), namespace=kns, labels=labels))
    base = f"{state_dir}/{k8s_name(ns)}/{k8s_name(name)}"
    flink_config = {
        "execution.checkpointing.dir": f"{base}/checkpoints",
        "execution.checkpointing.savepoint-dir": f"{base}/savepoints",
        "execution.checkpointing.interval": "10s",
        "kubernetes.operator.deployment.rollback.enabled": "true",
        "kubernetes.operator.savepoint.history.max.count": "10",
        **(config or {}),
    }
    if savepoint_interval_s:
        flink_config["kubernetes.operator.periodic.savepoint.interval"] = f"{savepoint_interval_s}s"
    pod = to_dict(k.V1PodTemplateSpec(metadata=k.V1ObjectMeta(labels=labels), spec=k.V1PodSpec(containers=[
        k.V1Container(name="flink-main-container", security_context=k.V1SecurityContext(
            run_as_non_root=True, allow_privilege_escalation=False))])))  # fmt: skip
    job = _flink_job(kind, artifact, entry_class, list(args or []), parallelism)
    job.update({"state": "running", "upgradeMode": upgrade_mode})  # the operator's modes are Loam's
    if savepoint:
        job["initialSavepointPath"] = savepoint
    resource = {
        "apiVersion": FLINK_API,
        "kind": "FlinkDeployment",
        "metadata": meta,
        "spec": {
            "image": image,
            "flinkVersion": FLINK_K8S_VERSION,
            "serviceAccount": "flink",
            "flinkConfiguration": flink_config,
            "podTemplate": pod,
            "jobManager": {"replicas": 1, "resource": {"memory": jobmanager_memory, "cpu": 1}},
            "taskManager": {"resource": {"memory": taskmanager_memory, "cpu": 1}},
            "job": job,
        },
    }
    validate_custom(resource)
    return resource


def flink_state_snapshot(deployment: dict, snapshot_id: str, *, path: str | None = None) -> dict:
    """A savepoint of a FlinkDeployment as a FlinkStateSnapshot (CANONICAL, disposed of with
    the resource); ValueError if the operator's CRD schema refuses it."""
    meta = deployment["metadata"]
    resource = {
        "apiVersion": FLINK_API,
        "kind": "FlinkStateSnapshot",
        "metadata": to_dict(k.V1ObjectMeta(name=k8s_name(meta["name"], snapshot_id), namespace=meta["namespace"],
                                           labels=meta.get("labels"))),
        "spec": {
            "backoffLimit": 1,
            "jobReference": {"kind": "FlinkDeployment", "name": meta["name"]},
            "savepoint": {"alreadyExists": False, "disposeOnDelete": True, "formatType": "CANONICAL",
                          **({"path": path} if path else {})},
        },
    }  # fmt: skip
    validate_custom(resource)
    return resource


def flink_action(deployment: dict, action: str, **kw: Any) -> dict:
    """The resource an action applies (FLINK_ACTIONS): the patched FlinkDeployment, or for
    `savepoint` a FlinkStateSnapshot (`snapshot_id`). `upgrade` takes `job` (spec.job of the
    new version, from flink_deployment); `rollback` `job` and `savepoint`."""
    if action == "savepoint":
        return flink_state_snapshot(deployment, kw["snapshot_id"])
    patched = copy.deepcopy(deployment)
    job = patched["spec"]["job"]
    if action == "suspend":
        job["state"] = "suspended"
    elif action == "resume":
        job["state"] = "running"
    elif action == "upgrade":
        job.update({key: v for key, v in kw["job"].items() if key not in ("state", "initialSavepointPath")})
        job["state"] = "running"
    elif action == "rollback":
        job.update({key: v for key, v in kw["job"].items() if key != "state"})
        job["initialSavepointPath"] = kw["savepoint"]
        job["savepointRedeployNonce"] = job.get("savepointRedeployNonce", 0) + 1
        job["state"] = "running"
    else:
        raise ValueError(f"{action!r} has no patch: see FLINK_ACTIONS ({', '.join(FLINK_ACTIONS)})")
    validate_custom(patched)
    return patched
