"""loam-celery: Celery on Loam Jobs (spec §7.1). Three plug points over `loam.jobs.v1`:

- the kombu transport `loam` (transport.py): kombu has no entry point for transports, so
  the package installs a start-up hook (`loam_celery.pth`, startup.py, decision 0029)
  that registers the alias in every Python process of the environment without importing
  kombu; `broker_url = "loam://127.0.0.1:7720/<namespace>"` then resolves with no import
  in the app. `import loam_celery` stays valid (it registers the alias too, for
  `python -S` or an environment where site-packages .pth files are not read), and
  `broker_transport = "loam_celery.transport:Transport"` works without either;
- the result backend `loam://` (backend.py), through Celery's result-backend entry point;
- the beat scheduler `loam` (beat.py), through Celery's beat-scheduler entry point.

Credentials come from the environment variable named by the `token_env` transport
option (default LOAM_TOKEN), never from the URL.

This module is imported at every interpreter start-up by the .pth hook: it must import
nothing heavy (no kombu, no celery).
"""

from loam_celery.startup import register_transport_alias

__version__ = "0.1.0"

register_transport_alias()

__all__ = ["__version__"]
