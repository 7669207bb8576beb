"""The `loam` transport alias, registered without importing kombu (decision 0029).

kombu resolves a broker URL's scheme through one dict, `kombu.transport.TRANSPORT_ALIASES`,
and has no entry point for transports. The loam-celery package installs `loam_celery.pth`
into site-packages, and Python's `site` runs its one code line at every start-up. That
line (`PTH_LINE`, built from `PTH_SOURCE`) must cost next to nothing in the many processes
that never touch Celery, so it reads no file: it only puts a small finder at the head of
`sys.meta_path`. When `kombu.transport` is imported, that finder hands over to
`TransportAliasFinder` here, which asks the other finders for the module, wraps its
loader so the alias goes in right after the module body runs (before anyone can read the
dict), and removes every finder of ours.

`import loam_celery` calls `register_transport_alias()`, which does the same from inside
a process (at once if kombu.transport is loaded already). Forked processes (Celery's
prefork pool) inherit the dict; spawned ones run site again.
"""

import sys

TRANSPORT_MODULE = "kombu.transport"
TRANSPORT_ALIAS = "loam"
TRANSPORT_CLASS = "loam_celery.transport:Transport"
MARK = "loam_celery_alias"  # an attribute on every finder of ours, so none asks another

# The finder the .pth installs, kept here so a test can hold loam_celery.pth to it.
PTH_SOURCE = """class LoamTransportAlias:
    loam_celery_alias = True

    def find_spec(self, name, path=None, target=None):
        if name != "kombu.transport":
            return None
        from loam_celery.startup import TransportAliasFinder

        return TransportAliasFinder().find_spec(name, path, target)


if not any(getattr(f, "loam_celery_alias", False) for f in sys.meta_path):
    sys.meta_path.insert(0, LoamTransportAlias())
"""
PTH_LINE = f'import sys; exec({PTH_SOURCE!r}, {{"sys": sys}})\n'


def _add_alias(module) -> None:
    module.TRANSPORT_ALIASES.setdefault(TRANSPORT_ALIAS, TRANSPORT_CLASS)


class _AliasOnImport:
    """Loader wrapper: runs kombu.transport's own loader, then adds the alias."""

    def __init__(self, loader) -> None:
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        _add_alias(module)

    def __getattr__(self, name):  # get_source, get_filename, ...: the real loader's
        return getattr(self.loader, name)


class TransportAliasFinder:
    """A `sys.meta_path` finder that only answers for kombu.transport, by asking the
    finders that are not ours and wrapping the loader they return. Any other name costs
    one string comparison."""

    loam_celery_alias = True

    def find_spec(self, name, path=None, target=None):
        if name != TRANSPORT_MODULE:
            return None
        for finder in sys.meta_path:
            if getattr(finder, MARK, False) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        uninstall()
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _AliasOnImport(spec.loader)
        return spec


def uninstall() -> None:
    """Remove every finder of ours (the .pth's and this module's)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, MARK, False)]


def register_transport_alias() -> None:
    """Make `loam://` broker URLs resolve, now or when kombu.transport is imported."""
    module = sys.modules.get(TRANSPORT_MODULE)
    if module is not None:
        _add_alias(module)
    elif not any(getattr(f, MARK, False) for f in sys.meta_path):
        sys.meta_path.insert(0, TransportAliasFinder())
