"""The header names Loam's services and clients send, defined once.

- `NAMESPACE_HEADER` (`x-loam-namespace`): the namespace of a call. From a client
  without auth (dev, loopback only) it picks the namespace; with auth the token names
  it, and a header naming another one is refused. Between services (gateway → queue
  core) it carries the namespace the gateway resolved from the caller's credential.
- `TOKEN_HEADER` (`x-loam-internal-token`): the deployment's internal token
  (`LOAM_INTERNAL_TOKEN`) on calls between services; a queue core serves internal
  calls only with it (or, with no token configured, only from loopback peers).
- `ACTOR_HEADER` (`x-loam-actor`): on a call between services, who the gateway checked
  the call was made for (loam_common.audit.Actor); the queue core audits its actions
  with it, and trusts it only on a call that passed the internal-call check.
"""

NAMESPACE_HEADER = "x-loam-namespace"
TOKEN_HEADER = "x-loam-internal-token"
ACTOR_HEADER = "x-loam-actor"
