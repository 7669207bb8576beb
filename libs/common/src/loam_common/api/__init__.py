"""The JobsService API as the services see it, declared once: `methods` (every RPC and
operation: its types, the action it needs, its routing key, read or write) and
`headers` (the header names services send each other). Every transport derives from
these; nothing here imports a service."""
