"""Durable mode: a Resonate-protocol server (version 2026-04-01) on the Loam store, so
Resonate's stock Python and TypeScript SDKs run durable functions against Loam.

- records.py: the protocol's records, addresses and checks
- transitions.py: the promise / task / schedule state machines, one transaction each
- facade.py: `DurableCore`, the one place their transactions run
- hub.py: the live SSE connections and push delivery (unicast / anycast)
- app.py: the ASGI transport (`POST /`, `GET /poll/{group}/{pid}`)
- timers.py: timeouts, leases, retries, schedules and retention as small loops
"""
