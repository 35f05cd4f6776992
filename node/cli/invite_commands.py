"""`peertrain run invite` and `run revoke`: members of an invite run (node/runs/invites.py)."""

from __future__ import annotations

import argparse
import json
import time

from .commands import call_daemon


def cmd_run_invite(args: argparse.Namespace) -> int:
    params = {"run": args.run, "peer": args.peer, "role": args.role, "expires": args.expires}
    result = call_daemon(args, "run.invite", params)
    if args.json:
        print(json.dumps(result))
        return 0
    until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(result["expires_ms"] / 1000))
    print(
        f"certified {result['peer']} as {result['role']} of run {result['name']} until "
        f"{until}. Give them this command:\n"
        f"  peertrain join <your address> --run {result['run_id']} "
        f"--certificate {result['certificate']}"
    )
    return 0


def cmd_run_revoke(args: argparse.Namespace) -> int:
    params = {"run": args.run, "peer": args.peer}
    result = call_daemon(args, "run.revoke", params)
    print(json.dumps(result) if args.json else f"revoked {result['peer']}")
    return 0
