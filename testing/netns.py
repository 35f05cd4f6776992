"""The namespace test internet (scripts/netns-nat) as seen from the tests: set up, skip, run in it.

Every process started here is ours: we keep its Popen and stop it by PID. The namespaces are
torn down at the end of the session, which also ends anything an aborted test left inside.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from peertrain.node.cli.processes import DaemonProcess

# the script ships with a checkout of the repository, not in the wheel (scripts/ stays out)
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "netns-nat"

# name of the namespace a node runs in → the address it listens on there
PUBLIC = {"pub": "10.213.0.10", "pub2": "10.213.0.11"}
NATED = {
    "cone": "192.168.21.2",
    "cone2": "192.168.24.2",
    "sym": "192.168.22.2",
    "sym2": "192.168.25.2",
    "fwd": "192.168.23.2",
}
WAN = {
    "cone": "10.213.0.21",
    "cone2": "10.213.0.24",
    "sym": "10.213.0.22",
    "sym2": "10.213.0.25",
    "fwd": "10.213.0.23",
}
FORWARDED_PORT = 4001


# namespace names are global on the machine: each test session (pid) gets its own set
PREFIX = os.environ.get("NETNS_NAT_PREFIX") or f"pt{os.getpid() % 100000}-"


def ns(name: str) -> str:
    return f"{PREFIX}{name}"


def _script(command: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NETNS_NAT_PREFIX": PREFIX}
    return subprocess.run([str(SCRIPT), command], capture_output=True, text=True, env=env)


def ip_of(name: str) -> str:
    return PUBLIC.get(name) or NATED[name]


def _with_admin_tools() -> None:
    """Put sbin on PATH (for us and every process we start): root's tools live there, and a
    bare environment (`env -i`, cron, a container's default) leaves it off, which skipped
    every namespace test for want of `nft` on a machine that has it."""
    path = os.environ.get("PATH", "").split(os.pathsep)
    extra = [d for d in ("/usr/local/sbin", "/usr/sbin", "/sbin") if d not in path]
    os.environ["PATH"] = os.pathsep.join([*path, *extra])


def why_unavailable() -> str | None:
    """None when the namespaces can be built here, else the reason to skip."""
    if os.geteuid() != 0:
        return "NAT tests need root (network namespaces); run them as root or skip"
    if not SCRIPT.exists():
        return f"NAT tests need {SCRIPT} (a checkout of the repository, not an installed wheel)"
    _with_admin_tools()
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            package = "iproute2" if tool == "ip" else "nftables"
            return f"NAT tests need '{tool}' (apt-get install {package})"
    name = f"{PREFIX}probe"
    probe = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create network namespaces here: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def setup() -> None:
    done = _script("setup")
    if done.returncode != 0:
        raise RuntimeError(f"scripts/netns-nat setup failed:\n{done.stderr}")


def teardown() -> None:
    _script("teardown")


def exists() -> bool:
    return _script("status").returncode == 0


def in_ns(name: str, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", ns(name), *argv]


class NamespacedDaemon(DaemonProcess):
    """A `peertrain node start` process inside one of the namespaces (control socket: a file)."""

    def __init__(self, name: str, home: Path, args: list[str], env: dict[str, str] | None = None):
        super().__init__(home, args, env)
        self.name = name

    def start(self) -> NamespacedDaemon:
        self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._signalled = False
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(self.env or {})}
        argv = in_ns(
            self.name, [sys.executable, "-m", "peertrain", *self.args, "--home", str(self.home)]
        )
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        return self


def daemon_args(name: str, *, bootstrap: list[str] = (), port: int = FORWARDED_PORT) -> list[str]:
    args = ["node", "start", "--listen", f"/ip4/{ip_of(name)}/tcp/{port}", "--log-format", "json"]
    for addr in bootstrap:
        args += ["--bootstrap", addr]
    return args


def silence(name: str, port: int) -> None:
    """Drop every TCP packet to or from `port` in namespace `name`, with no reset or FIN: to
    its peers, the node listening there vanishes (a power cut), while its process and its
    connections live on. Undone with the namespaces."""
    table = f"pt_silence_{port}"
    rules = f"""table inet {table}
delete table inet {table}
table inet {table} {{
    chain input {{ type filter hook input priority -10; policy accept; tcp dport {port} drop; }}
    chain output {{ type filter hook output priority -10; policy accept; tcp sport {port} drop; }}
}}
"""
    subprocess.run(in_ns(name, ["nft", "-f", "-"]), input=rules, text=True, check=True)
