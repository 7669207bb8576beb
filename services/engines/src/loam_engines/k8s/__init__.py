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

Core resources are the client's typed models (`V1Deployment`, ...), whose constructors
refuse missing required fields; `to_dict` serialises them the way the API server reads
them. Nothing here talks to a cluster.
"""

from __future__ import annotations

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
        for crd in yaml.safe_load_all(path.read_text()):
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
