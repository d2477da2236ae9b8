"""The client's connection pools never hand out a keep-alive connection the server has closed:
a server that closes its connections after answering, without saying so (as llama-server was
seen doing in rate mode), must not fail the next requests.

Both pools endpoint_transport can give are tested: httpcore's under engine/transport.py `_Pool`
(HTTPS, and plain HTTP where http1 is not supported) and http1.Pool (plain HTTP on Linux).
`_Pool` used to drop closed connections only on its sweep (every 0.5 s): a request in that
window got a closed one and failed with "server disconnected without sending a response" (and
its one retry got a sibling closed at the same moment). The test takes the timed sweep out of
the picture (its period set to an hour on the pool under test) and waits until the client's
end has the server's end of file before the next requests, so a pool that hands such a
connection out fails here every time, however slow the machine."""
import asyncio
import select
import time

import httpx
import pytest

from benchmarks.engine import http1
from benchmarks.engine.addresses import AddressPolicy
from benchmarks.engine.transport import _Pool, endpoint_transport

BODY = b"ok"
LATER = 3  # requests after the first two, one at a time


class _Server:
    """An HTTP/1.1 server answering each request with 200 "ok" and keep-alive headers, then
    leaving the connection open until the test hangs up on every connection (close_all):
    so the client has put each connection back in its pool, idle, before the server closes it."""

    def __init__(self):
        self.accepted = 0
        self.answered: list = []

    async def start(self) -> str:
        async def handle(reader, writer):
            self.accepted += 1
            try:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nKeep-Alive: timeout=5, max=100\r\n\r\n"
                             + BODY)
                await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            self.answered.append(writer)
        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/"

    async def close_all(self) -> None:
        writers, self.answered = self.answered, []
        for writer in writers:
            writer.close()
            try:
                await writer.wait_closed()
            except ConnectionError:
                pass

    async def stop(self) -> None:
        await self.close_all()
        self.server.close()
        await self.server.wait_closed()


def _httpcore_idle(transport) -> list:
    """The sockets of the httpcore pool's idle connections."""
    return [c._connection._network_stream.get_extra_info("socket")
            for c in transport._pool.connections if c.is_idle()]


def _httpcore_seen_closed(transport) -> bool:
    """The server's end of file is waiting on every idle connection's socket (select on the
    socket itself, not the pool's own test)."""
    socks = _httpcore_idle(transport)
    return len(select.select(socks, [], [], 0)[0]) == len(socks)


def _http1_idle(transport) -> list:
    return [c for pool in transport.pools.values() for c in pool.idle]


def _http1_seen_closed(transport) -> bool:
    """The client's socket-reading thread has read every idle connection to its end of file."""
    return all(c.eof for c in _http1_idle(transport))


async def _until(condition, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        await asyncio.sleep(0.002)


@pytest.mark.parametrize("pool", ["httpcore", "http1"])
def test_connections_the_server_closed_are_not_given_to_the_next_requests(pool, monkeypatch):
    if pool == "httpcore":
        monkeypatch.setattr(http1, "SUPPORTED", False)  # endpoint_transport's choice for HTTPS

    async def go():
        server = _Server()
        url = await server.start()
        limits = httpx.Limits(max_connections=8, max_keepalive_connections=8)
        transport = endpoint_transport(url, limits, AddressPolicy())
        if pool == "httpcore":
            assert isinstance(transport._pool, _Pool)
            transport._pool.SWEEP_S = 3600.0  # no timed sweep after the first: only what a request meets
            idle, seen_closed = (lambda: _httpcore_idle(transport)), (lambda: _httpcore_seen_closed(transport))
        else:
            assert isinstance(transport, http1.Transport)
            idle, seen_closed = (lambda: _http1_idle(transport)), (lambda: _http1_seen_closed(transport))
        client = httpx.AsyncClient(transport=transport)
        outcomes, idle_before_hangup = [], []

        async def get():
            try:
                response = await client.get(url)
                outcomes.append((response.status_code, response.content))
            except httpx.HTTPError as exc:
                outcomes.append(type(exc).__name__)

        try:
            # Two connections, both back in the pool as idle; then the server closes them.
            await asyncio.gather(get(), get())
            for _ in range(LATER):
                idle_before_hangup.append(len(idle()))
                await server.close_all()
                await _until(seen_closed, "the client's end of every idle connection has the end of file")
                await get()  # must be given a live (new) connection
        finally:
            await client.aclose()
            await server.stop()
        return outcomes, idle_before_hangup, server.accepted

    outcomes, idle_before_hangup, accepted = asyncio.run(go())
    assert outcomes == [(200, BODY)] * (2 + LATER)
    # The connections the server closed were in the pool, idle: two, then the one each later request opened.
    assert idle_before_hangup == [2] + [1] * (LATER - 1)
    assert accepted == 2 + LATER  # one connection per request: none reused after its close
