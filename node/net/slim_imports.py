"""Keep py-libp2p's unused optional dependencies out of the daemon's memory.

Why: `import libp2p` (0.8.1) imports ~1250 modules and costs ≈81 MiB of RSS, because its
top-level modules import, unconditionally, the libraries of features that a peertrain node
never turns on:

    package             pulled in by (libp2p 0.8.1)               we never use it because
    aioquic             transport.quic, transport.webtransport    host.py builds TCP only
      (+ OpenSSL, service_identity through aioquic.tls)
    zeroconf            discovery.mdns (imported by basic_host)   enable_mDNS stays False
    requests, httpx     security.tls.autotls (basic_host)         enable_autotls stays False
      (+ urllib3, charset_normalizer, httpcore, …)
    prometheus_client   metrics.*, rcmgr.prometheus_exporter      enable_metrics / Prometheus off
    trio_websocket      transport.websocket (transport.__init__)  host.py builds TCP only
      (+ wsproto, h11: ≈0.1 s of a daemon's start, on the critical path of `peertrain join`)

`install()` puts a meta-path finder in front of the import system that answers imports of
these packages with inert placeholder modules. Anything taken from a placeholder module is a
placeholder class: libp2p can subclass it, annotate with it, compare against it, and look up
attributes on it, so its modules import unchanged. Calling or instantiating one raises
`SlimmedDependencyUsed`, naming the package and how to get it back. Because libp2p wraps
some construction in `except Exception`, every such use is also logged at error level and
recorded (`uses()`), so it cannot pass silently.

Scope: only the daemon process installs it (`peertrain node start` / `join`), before anything
imports libp2p; packages already imported are left alone. Set PEERTRAIN_FULL_IMPORTS=1 to
turn it off. A feature turned on at run time that needs a slimmed package takes it back with
`release(package)` (the metrics endpoint does so for prometheus_client). Verified against
py-libp2p 0.8.1: tests/node/test_slim_imports.py runs identify, ping, Kad-DHT, gossipsub,
circuit relay v2 and DCUtR with the guard on, and fails when the installed py-libp2p is another
version, so that this list is re-checked on upgrade.
"""

from __future__ import annotations

import collections
import importlib.abc
import importlib.machinery
import logging
import os
import sys
import types
from collections.abc import Iterable
from typing import Any

from ..errors import SlimmedDependencyUsed

log = logging.getLogger(__name__)

VERIFIED_LIBP2P = "0.8.1"
DISABLE_ENV = "PEERTRAIN_FULL_IMPORTS"
SLIMMED: dict[str, str] = {
    "aioquic": "the QUIC and WebTransport transports",
    "zeroconf": "mDNS discovery",
    "requests": "AutoTLS certificate issuance (ACME)",
    "httpx": "AutoTLS certificate issuance (ACME)",
    "prometheus_client": "Prometheus metrics",
    "trio_websocket": "the WebSocket transport",
}
MAX_RECORDED_USES = 64

_uses: collections.deque[str] = collections.deque(maxlen=MAX_RECORDED_USES)


def install(packages: Iterable[str] = SLIMMED) -> SlimFinder | None:
    """Answer imports of `packages` with placeholders from now on; idempotent.

    Returns the finder, or None when PEERTRAIN_FULL_IMPORTS is set. Packages that are already
    imported keep their real modules.
    """
    if os.environ.get(DISABLE_ENV, "").lower() in ("1", "true", "yes", "on"):
        return None
    for finder in sys.meta_path:
        if isinstance(finder, SlimFinder):
            return finder
    finder = SlimFinder(p for p in packages if p not in sys.modules)
    sys.meta_path.insert(0, finder)
    return finder


def uninstall(finder: SlimFinder) -> None:
    """Remove `finder` and the placeholder modules it made (tests use this)."""
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        if isinstance(module, PlaceholderModule) and spec is not None and spec.loader is finder:
            del sys.modules[name]


def release(package: str) -> None:
    """Let `package` load for real from now on: a feature that needs it was turned on.

    Its placeholder modules leave `sys.modules`, so the next import finds the real package;
    libp2p modules that took placeholders at import keep them (their features stay off)."""
    for finder in sys.meta_path:
        if isinstance(finder, SlimFinder):
            finder.packages = finder.packages - {package}
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] == package and isinstance(module, PlaceholderModule):
            del sys.modules[name]


def uses() -> list[str]:
    """What was called or instantiated from a placeholder in this process, oldest first."""
    return list(_uses)


def is_placeholder(obj: object) -> bool:
    return isinstance(obj, (PlaceholderModule, _Placeholder))


class SlimFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Meta-path finder and loader of placeholder modules for a set of top-level packages."""

    def __init__(self, packages: Iterable[str]):
        self.packages = frozenset(packages)

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] not in self.packages:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return PlaceholderModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class PlaceholderModule(types.ModuleType):
    """A module whose every public attribute is a placeholder class, made on first access."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _placeholder(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Placeholder(type):
    """Metaclass of the classes that stand in for anything taken from a slimmed package."""

    _slim_origin: str

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls._slim_origin}.{name}")

    def __getitem__(cls, item: Any) -> Any:  # generic subscription in annotations: Foo[Bar]
        return cls

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        origin = cls._slim_origin
        used = origin
        if "_slim_origin" not in cls.__dict__:  # a class libp2p derived from a placeholder
            used = f"{cls.__module__}.{cls.__qualname__} (a subclass of {origin})"
        package = origin.partition(".")[0]
        message = (
            f"{used} is not available in the peertrain daemon: {package} (needed only for "
            f"{SLIMMED.get(package, 'a feature peertrain does not use')}) is kept out of memory by "
            f"peertrain.node.net.slim_imports To use it, set {DISABLE_ENV}=1 or take {package} off "
            "SLIMMED in node/net/slim_imports.py."
        )
        _uses.append(used)
        log.error("%s", message)
        raise SlimmedDependencyUsed(message)


def _placeholder(origin: str) -> type:
    module, _, name = origin.rpartition(".")
    namespace = {"_slim_origin": origin, "__module__": module, "__qualname__": name}
    return _Placeholder(name, (), namespace)
