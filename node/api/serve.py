"""A daemon with its owner's front door: the node's services, then the control socket.

The daemon does not know how it is reached (the layer order puts api/ above it): whoever runs a
node — the CLI, `peertrain.testing`, a benchmark — starts it through `serve_node`, which starts
the daemon's services first and then answers on `<home>/control.sock` with the daemon's
control methods (control_methods.py). A control client therefore never sees a node whose
services are half started.
With `metrics_listen` set, the metrics endpoint and dashboard (node/api/web.py) start last;
with `tensorboard` set, the run metrics' TensorBoard log (tensorboard_log.py) after them.
"""

from __future__ import annotations

from pathlib import Path

import trio

from ..daemon import Daemon
from .control import ControlServer
from .control_methods import control_methods


async def serve_node(
    daemon: Daemon, *, task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED
) -> None:
    """Run `daemon`, its control server and, if configured, its web service; `started(daemon)`
    once all serve."""
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        control = ControlServer(daemon.config.control_socket, control_methods(daemon))
        await nursery.start(control.run)
        if daemon.config.metrics_listen is not None:
            from .web import WebService  # only then: it loads prometheus_client

            listen, hosts = daemon.config.metrics_listen, daemon.config.dashboard_hosts
            await nursery.start(WebService(daemon, listen, dashboard_hosts=hosts).run)
        if daemon.config.tensorboard is not None:
            from .tensorboard_log import TensorBoardLog

            await nursery.start(TensorBoardLog(daemon, Path(daemon.config.tensorboard)).run)
        task_status.started(daemon)
