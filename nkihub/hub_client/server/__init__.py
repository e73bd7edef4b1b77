"""The local Hub-compatible HTTP server (starlette app, run by uvicorn), with pages for a browser.

``serve_in_background(root)`` starts it in a thread on a free loopback port and returns a
:class:`HubServer` whose ``url`` is the endpoint to give huggingface_hub; ``serve(root, port)``
runs it in the foreground (``nkihub serve``).
"""

from __future__ import annotations

import socket
import threading
import time

from .app import HubApp, create_app
from .views import Faults, HubConfig

__all__ = ["HubApp", "HubServer", "create_app", "serve", "serve_in_background", "Faults", "HubConfig"]


class HubServer:
    """A running server: ``url`` (ends without ``/``), ``app`` (its config and fault hooks), ``stop()``."""

    def __init__(self, app: HubApp, server, thread: threading.Thread, url: str):
        self.app, self._server, self._thread, self.url = app, server, thread, url

    @property
    def storage(self):
        return self.app.config.storage

    @property
    def faults(self) -> Faults:
        return self.app.config.faults

    def stop(self, timeout: float = 5.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self) -> "HubServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"HubServer({self.url!r}, root={str(self.storage.root)!r})"


def _uvicorn_server(app, log_level: str):
    import uvicorn

    config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="off", timeout_keep_alive=30)
    return uvicorn.Server(config)


def serve_in_background(root, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                        lfs_threshold: int | None = None, tree_page_size: int = 1000,
                        log_level: str = "warning", trusted_publishers=("neuron",),
                        trusted_keys: dict | None = None) -> HubServer:
    """Start the Hub on ``host:port`` (0 = a free port) in a daemon thread and wait until it accepts.
    ``trusted_publishers``: organizations reported as trusted kernel publishers; ``trusted_keys``: org ->
    publisher keys whose signatures its pages call trusted. Its pages are at ``url + "/"``."""
    app = create_app(root, token=token, lfs_threshold=lfs_threshold, tree_page_size=tree_page_size,
                     trusted_publishers=trusted_publishers, trusted_keys=trusted_keys)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    port = sock.getsockname()[1]
    server = _uvicorn_server(app, log_level)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name=f"nkihub-hub-{port}")
    thread.start()
    deadline = time.monotonic() + 60  # generous: a loaded machine can take seconds to schedule the thread
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the local Hub did not start on {host}:{port}")
        time.sleep(0.01)
    return HubServer(app, server, thread, f"http://{host}:{port}")


def serve(root, host: str = "127.0.0.1", port: int = 8080, token: str | None = None,
          lfs_threshold: int | None = None, log_level: str = "info", trusted_publishers=("neuron",),
          trusted_keys: dict | None = None) -> None:
    """Run the Hub in the foreground until interrupted."""
    import uvicorn

    app = create_app(root, token=token, lfs_threshold=lfs_threshold, trusted_publishers=trusted_publishers,
                     trusted_keys=trusted_keys)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False, lifespan="off")
