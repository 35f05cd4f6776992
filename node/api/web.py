"""The node's web face on `metrics_listen`: Prometheus `/metrics`, the dashboard, its JSON.

    GET /             the dashboard (node/api/dashboard/, shipped in the package: no CDN)
    GET /app.js, /style.css
    GET /api/status   the daemon's status (as `peertrain status --json`) plus `history`
    GET /metrics      Prometheus text format (node/api/metrics.py)

Started by node/api/serve.py only when `metrics_listen` is set, so an idle node neither imports
prometheus_client nor holds a history. The history is fed by one sampler task each second,
whoever polls: the dashboard's loss curve is the same for every browser and survives a reload.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import TYPE_CHECKING

import trio

from ..config import host_and_port
from .history import StatusHistory
from .http import Handler, HttpResponse, HttpServer

if TYPE_CHECKING:
    from .readings import NodeReadings

PRIVATE_STATUS = frozenset({"home", "pid"})  # left out of /api/status
SAMPLE_INTERVAL = 1.0  # seconds between status snapshots for the history
ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}


class WebService:
    """`await nursery.start(service.run)` → (host, port) it listens on."""

    def __init__(
        self, node: NodeReadings, listen: str, *, dashboard_hosts: tuple[str, ...] = ()
    ) -> None:
        """`dashboard_hosts`: the Host headers it answers besides its own address (the
        `dashboard_hosts` setting; node/api/http.py)."""
        from . import metrics  # here, not at module level: it imports prometheus_client

        self.node, self.dashboard_hosts = node, dashboard_hosts
        self.host, self.port = host_and_port(listen)
        self.history = StatusHistory()
        self._registry = metrics.registry_for(node, self.history)
        self._render = metrics.render
        self._content_type = metrics.CONTENT_TYPE
        self._assets = {path: _asset(name, kind) for path, (name, kind) in ASSETS.items()}

    def routes(self) -> dict[str, Handler]:
        return {
            **{path: (lambda r=response: r) for path, response in self._assets.items()},
            "/api/status": self.api_status,
            "/metrics": self.metrics,
        }

    def api_status(self) -> HttpResponse:
        """The status without what only the machine's owner needs (its home path, the pid):
        anyone who can reach the port reads it."""
        status = {k: v for k, v in self.node.status().items() if k not in PRIVATE_STATUS}
        body = {**status, "history": self.history.as_dict()}
        return HttpResponse(200, json.dumps(body).encode(), "application/json")

    def metrics(self) -> HttpResponse:
        return HttpResponse(200, self._render(self._registry), self._content_type)

    async def run(
        self, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        server = HttpServer(self.routes(), self.host, self.port, allowed_hosts=self.dashboard_hosts)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._sample)
            task_status.started(await nursery.start(server.run))

    async def _sample(self) -> None:
        while True:
            self.history.observe(self.node.status())
            await trio.sleep(SAMPLE_INTERVAL)


def _asset(name: str, content_type: str) -> HttpResponse:
    data = resources.files(__package__).joinpath("dashboard", name).read_bytes()
    return HttpResponse(200, data, content_type)
