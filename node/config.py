"""Node configuration: defaults < `config.toml` in the home < `PEERTRAIN_*` env vars < flags.

Every option has one name used everywhere: the TOML key `listen`, the env var
`PEERTRAIN_LISTEN`, the flag `--listen`. List options take several flags, a TOML list, or a
comma-separated env var. Unknown keys fail with the list of known ones and the nearest match,
because a typo that is silently ignored costs a user an afternoon.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import NodeConfigError

CONFIG_FILE = "config.toml"
ENV_PREFIX = "PEERTRAIN_"
LOG_FORMATS = ("auto", "rich", "plain", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")
_PSK_RE = re.compile(r"^[0-9a-fA-F]{64}$")


def default_home() -> Path:
    """The per-user data directory, unless PEERTRAIN_HOME says otherwise."""
    if env := os.environ.get(ENV_PREFIX + "HOME"):
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("peertrain", appauthor=False))


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeConfig:
    """Everything a daemon needs to start. Built by `load_config`, never by hand in the CLI."""

    home: Path
    listen: tuple[str, ...] = ("/ip4/0.0.0.0/tcp/0",)
    bootstrap: tuple[str, ...] = ()
    announce: tuple[str, ...] = ()
    psk: str | None = None
    run: str | None = None
    run_role: str | None = None  # SWARM runs: "server" (default) or "trainer"
    run_data: str | None = None  # the user's data file for `run` (checked against its digest)
    run_certificate: str | None = None  # invite runs: the token `peertrain run invite` printed
    # model factories by import path (package.module:factory) this node may import when a run
    # names them: importing runs code, so only what the local user lists (swarm/models/registry)
    trusted_models: tuple[str, ...] = ()
    # what this node agrees to hold for one run, checked before a spec is built (swarm/budget.py)
    max_params: int = 200_000_000
    max_memory: int = 0  # bytes; 0: half this machine's memory
    log_level: str = "info"
    log_format: str = "auto"
    attack: str | None = None  # research/testing: make this node Byzantine (swarm/attacks.py)
    slowdown: float = 1.0  # research/testing: each Streaming DiLoCo inner step takes N× as long
    uplink_mbit: float = 0.0  # research/testing: all this node sends shares an uplink of N Mbit/s
    device: str = "auto"  # where runs train: auto|cpu|cuda[:N]|mps (swarm/devices.py)
    precision: str = "fp32"  # autocast for forward and loss: fp32|bf16|fp16
    ranks: int = 1  # processes (one device each) training as this one node (intra_node.py)
    dial_timeout: float = 10.0
    reconnect_interval: float = 2.0
    # NAT traversal (node/nat/relays.py): what a public node grants strangers as a circuit relay v2
    # hop, and how many relays a node behind NAT holds reservations on
    relay_reservations: int = 64  # reservations granted at once
    relay_circuits: int = 8  # relayed connections at once per reserving peer
    relay_duration: float = 600.0  # seconds a relayed connection may last
    relay_data: int = 1 << 30  # bytes a relayed connection may carry
    relay_bandwidth: float = 16e6  # bytes/s per direction of a relayed connection (0: no cap)
    relays: int = 2  # reservations a node behind NAT holds
    upnp: bool = True  # ask a UPnP gateway for a port mapping when behind NAT
    # The resource budget (node/net/budget.py): what peers together can make this node take
    budget_connections: int = 256  # connections at once, all peers
    budget_connections_per_peer: int = 4
    budget_connections_per_prefix: int = 32  # per IPv4 /24 or IPv6 /48 (not loopback/private)
    budget_receive_memory: int = 2 << 30  # bytes of downloads in flight (states, updates)
    budget_receive_memory_per_peer: int = 512 << 20
    budget_disk: int = 20 << 30  # bytes under <home>/runs (checkpoints, manifests)
    budget_relay_circuits: int = 32  # circuits relayed at once for others, all reservations
    budget_relay_bandwidth: int = 32_000_000  # bytes/s relayed for others in all (0: no cap)
    budget_relay_reservations_per_prefix: int = 4  # per IPv4 /24 or IPv6 /48 (not local)
    # HOST:PORT serving Prometheus /metrics and the dashboard (node/api/web.py); None: off
    metrics_listen: str | None = None
    # names besides `localhost` a request's Host may carry on metrics_listen (DNS rebinding:
    # node/api/http.py); IP literals are always answered
    dashboard_hosts: tuple[str, ...] = ()
    # folder where every run this node takes part in logs its metrics per round as TensorBoard
    # event files (node/api/tensorboard_log.py; needs the tensorboard extra); None: off
    tensorboard: str | None = None
    # rounds between the sample grids a diffusion member shows on its dashboard; 0: none
    sample_grid_every: int = 5
    # the name this node's owner gives it (`--name`), shown in status; "" = none. At most
    # PUBLIC_NAME_MAX printable characters (a peer's name reaches other people's terminals)
    public_name: str = ""

    @property
    def control_socket(self) -> Path:
        return control_socket_path(self.home)


UNIX_PATH_MAX = 100  # sun_path is 108 bytes on Linux, 104 on macOS


def control_socket_path(home: Path) -> Path:
    """`<home>/control.sock`, or, when that is too long for a Unix socket, a path derived from
    the home's hash in a private per-user folder under the temp dir (so `status` finds it too)."""
    path = Path(home).expanduser().absolute() / "control.sock"
    if len(str(path).encode()) <= UNIX_PATH_MAX:
        return path
    import hashlib
    import tempfile

    digest = hashlib.blake2b(str(path).encode(), digest_size=8).hexdigest()
    return Path(tempfile.gettempdir()) / f"peertrain-{os.getuid()}" / f"{digest}.sock"


_FIELDS = {f.name: f for f in dataclasses.fields(NodeConfig) if f.name != "home"}


def load_config(home: Path | None = None, overrides: Mapping[str, Any] | None = None) -> NodeConfig:
    """Merge file, env and flag values (flags in `overrides`; None means "not given")."""
    home = Path(home).expanduser() if home is not None else default_home()
    merged: dict[str, Any] = {}
    merged.update(_read_file(home / CONFIG_FILE))
    merged.update(_read_env(os.environ))
    merged.update({k: v for k, v in (overrides or {}).items() if v is not None})
    _reject_unknown(merged, source="options")
    values = {name: _coerce(name, value) for name, value in merged.items()}
    config = NodeConfig(home=home, **values)
    _validate(config)
    return config


def _read_file(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise NodeConfigError(f"{path}: not valid TOML ({exc}); fix the file or delete it") from exc
    _reject_unknown(data, source=str(path))
    return data


def _read_env(environ: Mapping[str, str]) -> dict[str, Any]:
    found = {}
    for name in _FIELDS:
        key = ENV_PREFIX + name.upper()
        if key in environ and environ[key] != "":
            found[name] = environ[key]
    return found


def _reject_unknown(data: Mapping[str, Any], *, source: str) -> None:
    for key in data:
        if key not in _FIELDS:
            close = difflib.get_close_matches(key, _FIELDS, n=1)
            hint = f"did you mean `{close[0]}`? " if close else ""
            raise NodeConfigError(
                f"{source}: unknown key `{key}`; {hint}known keys: {', '.join(sorted(_FIELDS))}"
            )


def _coerce(name: str, value: Any) -> Any:
    default = _FIELDS[name].default
    if isinstance(default, tuple):
        if isinstance(value, str):
            value = [part for part in re.split(r"[,\s]+", value) if part]
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise NodeConfigError(f"`{name}` must be a list of strings, got {value!r}")
        return tuple(value)
    if isinstance(default, bool):
        words = {
            "1": True,
            "true": True,
            "yes": True,
            "on": True,
            "0": False,
            "false": False,
            "no": False,
            "off": False,
        }
        if isinstance(value, str) and value.lower() in words:
            return words[value.lower()]
        if not isinstance(value, bool):
            raise NodeConfigError(f"`{name}` must be true or false, got {value!r}")
        return value
    if isinstance(default, int):
        try:
            return int(value)
        except (TypeError, ValueError):
            raise NodeConfigError(f"`{name}` must be a whole number, got {value!r}") from None
    if isinstance(default, float):
        try:
            return float(value)
        except (TypeError, ValueError):
            raise NodeConfigError(f"`{name}` must be a number of seconds, got {value!r}") from None
    if value is not None and not isinstance(value, str):
        raise NodeConfigError(f"`{name}` must be a string, got {value!r}")
    return value


def _validate(config: NodeConfig) -> None:
    if config.log_format not in LOG_FORMATS:
        raise NodeConfigError(
            f"`log_format` must be one of {', '.join(LOG_FORMATS)}, got {config.log_format!r}"
        )
    if config.log_level.lower() not in LOG_LEVELS:
        raise NodeConfigError(
            f"`log_level` must be one of {', '.join(LOG_LEVELS)}, got {config.log_level!r}"
        )
    if config.psk is not None and not _PSK_RE.match(config.psk):
        raise NodeConfigError(
            "`psk` must be 64 hex characters (a 32-byte key); make one with "
            "`python -c 'import secrets; print(secrets.token_hex(32))'`"
        )
    if config.run_role not in (None, "server", "trainer"):
        raise NodeConfigError(f"`run_role` must be server or trainer, got {config.run_role!r}")
    if config.max_params < 1 or config.max_memory < 0:
        raise NodeConfigError(
            "`max_params` must be positive and `max_memory` ≥ 0 (0: half the RAM)"
        )
    if config.sample_grid_every < 0:
        raise NodeConfigError("`sample_grid_every` must be ≥ 0 (0: no sample grids)")
    _check_public_name(config.public_name)
    if not 1 <= config.ranks <= 64:
        raise NodeConfigError(f"`ranks` must be 1..64, got {config.ranks}")
    if not config.listen:
        raise NodeConfigError(
            "`listen` is empty; give at least one address such as /ip4/0.0.0.0/tcp/0"
        )
    for name in (
        "dial_timeout",
        "reconnect_interval",
        "relay_reservations",
        "relay_circuits",
        "relay_duration",
        "relay_data",
    ):
        if getattr(config, name) <= 0:
            raise NodeConfigError(f"`{name}` must be positive")
    for name in ("relay_bandwidth", "relays"):
        if getattr(config, name) < 0:
            raise NodeConfigError(f"`{name}` must be zero or more")
    _validate_multiaddrs(config)
    if config.metrics_listen is not None:
        host_and_port(config.metrics_listen)
    if config.tensorboard is not None:
        _check_tensorboard(config.tensorboard)


def _check_tensorboard(folder: str) -> None:
    """Refused at start, not at the first round hours later: the package is an extra."""
    import importlib.util

    if not folder:
        raise NodeConfigError("`tensorboard` (--tensorboard DIR) needs a folder, e.g. ./tb")
    if importlib.util.find_spec("tensorboard") is None:
        raise NodeConfigError(
            "--tensorboard needs the tensorboard package, which is not installed: "
            "pip install 'peertrain[tensorboard]'"
        )


def host_and_port(text: str) -> tuple[str, int]:
    """`127.0.0.1:9464` or `[::1]:9464` → (host, port); a NodeConfigError says what is wrong."""
    host, _, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or int(port) > 65535:
        raise NodeConfigError(
            f"`metrics_listen` must be HOST:PORT such as 127.0.0.1:9464, got {text!r}"
        )
    return host, int(port)


def _validate_multiaddrs(config: NodeConfig) -> None:
    from multiaddr import Multiaddr

    from .net.addresses import MULTIADDR_ERRORS

    for name in ("listen", "bootstrap", "announce"):
        for text in getattr(config, name):
            try:
                Multiaddr(text)
            except MULTIADDR_ERRORS as exc:
                raise NodeConfigError(f"`{name}`: {text!r} is not a multiaddr ({exc})") from None
    for text in config.bootstrap:
        if "/p2p/" not in text:
            raise NodeConfigError(
                f"`bootstrap`: {text!r} lacks the peer ID; use the full address a node prints, "
                "ending in /p2p/<peer id>"
            )


def config_as_dict(config: NodeConfig) -> dict[str, Any]:
    """A JSON-friendly view (the PSK is masked)."""
    out = {f: getattr(config, f) for f in _FIELDS}
    out["home"] = str(config.home)
    out["psk"] = "set" if config.psk else None
    out = {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}
    return out


PUBLIC_NAME_MAX = 32


def _check_public_name(name: str) -> None:
    """A public name is shown on other people's terminals and pages: printable characters only
    (no escape sequences, no line breaks), at most PUBLIC_NAME_MAX of them."""
    fix = f"give --name at most {PUBLIC_NAME_MAX} printable characters, e.g. --name alice-gpu-1"
    if len(name) > PUBLIC_NAME_MAX:
        raise NodeConfigError(f"`public_name` (--name) is {len(name)} characters long; {fix}")
    bad = next((c for c in name if not c.isprintable()), None)
    if bad is not None:
        raise NodeConfigError(
            f"`public_name` (--name) holds the control character {bad!r} at "
            f"{name.index(bad)}; {fix}"
        )
    if name != name.strip():
        raise NodeConfigError(f"`public_name` (--name) {name!r} starts or ends with a space; {fix}")


def field_names() -> tuple[str, ...]:
    return tuple(_FIELDS)
