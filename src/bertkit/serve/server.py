"""Running the app under uvicorn: the listening socket, and SIGTERM as a drain, exit status 0.

uvicorn's own handling stops accepting connections and lets open requests finish, then raises
the signal again once it is done, so the process would end with 143. `bertkit serve` treats
SIGTERM (and a first Ctrl-C) as the normal way to stop: the service drains (new requests 503,
accepted ones answered, the batcher's queue emptied) and the command returns 0. A second Ctrl-C
stops at once.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading

from bertkit.errors import UserError

DRAIN_S = 60.0  # longest wait for accepted requests after SIGTERM


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.listen(2048)
    return sock


def _server_class():
    import uvicorn

    class DrainingServer(uvicorn.Server):
        """uvicorn's server with our signal handling (see the module docstring)."""

        on_signal = staticmethod(lambda: None)

        @contextlib.contextmanager
        def capture_signals(self):
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            before = {s: signal.signal(s, self._stop) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for s, handler in before.items():
                    signal.signal(s, handler)

        def _stop(self, sig, frame) -> None:
            self.on_signal()
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            self.should_exit = True

    return DrainingServer


def make_server(app, service):
    """A uvicorn server for `app` whose signals drain `service`, and which stops if loading fails."""
    import uvicorn

    config = uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False, timeout_keep_alive=5,
                            timeout_graceful_shutdown=DRAIN_S, backlog=2048)
    server = _server_class()(config)
    server.on_signal = service.drain
    service.on_failure = lambda: setattr(server, "should_exit", True)
    return server


def run(app, service, sock: socket.socket) -> int:
    """Serve on `sock` until SIGTERM or Ctrl-C; 0 after a clean drain, a UserError if loading failed."""
    make_server(app, service).run(sockets=[sock])
    if service.error:
        raise UserError(service.error)
    return 0
