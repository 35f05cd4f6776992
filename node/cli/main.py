"""The `peertrain` command.

    peertrain id                      peer ID and friendly name of this home's identity
    peertrain node start              run the daemon in the foreground
    peertrain join PEER               run the daemon, connected to PEER (a /p2p/ multiaddr, or a
                                      bare peer ID found through the DHT from --bootstrap)
    peertrain status [--json]         ask the daemon running on this home
    peertrain run create --name N     start a training run on the daemon of this home
    peertrain run join --name N       join a run from the daemon of this home (swarm: --role)
    peertrain run export --out DIR    write the run's current model as a plain state_dict
    peertrain run leave [--run R]     stop taking part in a run (run list: runs in the DHT)
    peertrain run options             every run setting (--set KEY=VALUE): type, default, meaning
    peertrain logs [--follow]         the daemon's log (<home>/daemon.log)
    peertrain swarm local --nodes N   N daemons on loopback, as separate processes

Every option is also an environment variable: `--log-format json` is PEERTRAIN_LOG_FORMAT=json,
`--nodes 4` is PEERTRAIN_NODES=4. Precedence: flag > env > config.toml > default.
Heavy imports (libp2p, torch) happen inside the commands that need them, so `status` is quick.
The parser is in parser.py, each command's handler in commands.py.
"""

from __future__ import annotations

import sys

from peertrain.swarm.errors import ConfigError

from ..errors import NodeError
from .options import apply_env
from .parser import build_parser

EXIT_ERROR = 1
EXIT_USAGE = 2


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        parser.print_help()
        return EXIT_USAGE
    try:
        apply_env(args, parser)
        return args.handler(args) or 0
    except (NodeError, ConfigError) as exc:  # what the user can fix: no traceback
        print(f"peertrain: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
