"""Flink on Loam (spec §10.2, issue 21): jobs run unmodified on real Apache Flink, Loam
manages their lifecycle.

- `distribution`: where the `apache-flink` wheel's Flink lives (`make engines-flink`)
- `cluster`: the local session cluster Loam starts, supervises and stops
- `rest`: a typed async client of Flink's REST API
- `model`: deployments, versions, savepoints (domain types, JSON records)
- `recorder`: the `RunRecorder` protocol the engine runner implements, and its store version
- `artifacts`: job artifacts (jars, PyFlink scripts, SQL) in the blob store
- `lifecycle`: deploy, savepoint, suspend, resume, upgrade, rollback, cancel, reconcile
- `facade`: the async facade the gateway mounts (`loam_gateway.rest_flink`)
- `sql_runner`: the PyFlink program that runs Flink SQL statements on the cluster
"""
