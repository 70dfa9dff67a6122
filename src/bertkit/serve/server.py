"""Running the app under uvicorn: the listening socket, and SIGTERM as a drain, exit status 0.

uvicorn's own handling stops accepting connections and lets open requests finish, then raises
the signal again once it is done, so the process would end with 143. `bertkit serve` treats
SIGTERM (and a first Ctrl-C) as the normal way to stop: the service drains (new requests 503,
accepted ones answered, the batcher's queue emptied) and the command returns 0. A second Ctrl-C
stops at once.

Closing a listening socket resets the connections the kernel has queued but the server has not
yet accepted, and closing an accepted connection whose request is still unread resets it too: the
client sees "connection reset", not an answer. So after the signal the socket stays open for
SETTLE_S, and up to SETTLE_MAX_S while an accepted connection has not yet sent its request: every
client that connected before the signal is read and answered (503 if it was not accepted before),
and one that comes later is refused at connect, which a client knows is safe to retry.

uvicorn times out idle keep-alive connections but not a request head that never completes (a
slowloris client sending a header line now and then holds its connection forever; the body has
its own timeout, `requests.read_body`). So the HTTP protocol here is uvicorn's h11 one with a
header timeout: a connection must complete its request head within `Limits.header_timeout`
seconds of connecting, or of its first byte after an answer, or it is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading

from bertkit.errors import UserError

DRAIN_S = 60.0  # longest wait for accepted requests after SIGTERM
SETTLE_S = 0.25  # the listening socket stays open this long after SIGTERM, answering 503
SETTLE_MAX_S = 2.0  # ... and at most this long while a connection has not sent its request


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
        signalled = False

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
            self.signalled = True
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            self.should_exit = True

        async def shutdown(self, sockets=None) -> None:
            if self.signalled:
                await self._settle()
            await super().shutdown(sockets)

        async def _settle(self) -> None:
            loop = asyncio.get_running_loop()
            start = loop.time()
            while not self.force_exit:
                waited = loop.time() - start
                # uvicorn's HTTP protocols hold their current request as `cycle`: None until one is read.
                unread = any(getattr(c, "cycle", 0) is None for c in self.server_state.connections)
                if waited >= SETTLE_MAX_S or (waited >= SETTLE_S and not unread):
                    return
                await asyncio.sleep(0.01)

    return DrainingServer


def _protocol(header_timeout: float):
    """uvicorn's h11 protocol, closing a connection whose request head is not complete in time."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutProtocol(H11Protocol):
        _head_timer = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._head_timer is None and self._idle():
                self._arm()  # the first byte of a new request on a kept-alive connection
            super().data_received(data)
            if not self._idle():
                self._disarm()  # the head is complete: the body timeout takes over

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _idle(self) -> bool:
            """Waiting for (the rest of) a request head: h11 has not seen a whole one."""
            return self.conn.their_state is h11.IDLE and (self.cycle is None or self.cycle.response_complete)

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(header_timeout, self._expire)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _expire(self) -> None:
            self._head_timer = None
            if self._idle() and not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutProtocol


def make_server(app, service):
    """A uvicorn server for `app` whose signals drain `service`, and which stops if loading fails."""
    import uvicorn

    # Idle keep-alive connections are kept longer than clients keep theirs (httpx: 5 s), so a
    # client never sends a request on a connection the server is closing at that moment.
    config = uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False, timeout_keep_alive=75,
                            timeout_graceful_shutdown=DRAIN_S, backlog=2048,
                            http=_protocol(service.limits.header_timeout))
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
