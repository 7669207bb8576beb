"""loam-celery: Celery on Loam Jobs (spec §7.1). Three plug points over `loam.jobs.v1`:

- the kombu transport `loam` (transport.py): `import loam_celery` registers the alias,
  so `broker_url = "loam://127.0.0.1:7720/<namespace>"` resolves (kombu has no entry
  point for transports); `broker_transport = "loam_celery.transport:Transport"` works
  without the import;
- the result backend `loam://` (backend.py), through Celery's result-backend entry point;
- the beat scheduler `loam` (beat.py), through Celery's beat-scheduler entry point.

Credentials come from the environment variable named by the `token_env` transport
option (default LOAM_TOKEN), never from the URL.
"""

from kombu.transport import TRANSPORT_ALIASES

__version__ = "0.1.0"

TRANSPORT_ALIASES.setdefault("loam", "loam_celery.transport:Transport")

__all__ = ["__version__"]
