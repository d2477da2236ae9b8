"""The client's transports for httpx: every connection checked, plain HTTP timed.

Every connection to an endpoint goes through an address check (addresses.py): the host is
resolved when the worker connects, refused when any of its addresses is (a link-local or
metadata address, one outside the allowed networks...), and the connection is made to the
addresses just checked, never to a second lookup. TLS still names and verifies the URL's
host. A worker that reaches endpoints through a proxy (HTTP_PROXY and the like, unless
NO_PROXY covers the host) leaves resolution to the proxy: only the URL check applies then.

Plain-HTTP endpoints on Linux are served by the engine's own HTTP/1.1 client (http1.py: a
socket-reading thread that times every read with the kernel's receive timestamp, responses
parsed and events framed as they arrive); HTTPS and systems without SO_TIMESTAMPNS or epoll
keep httpx's transport on anyio's backend, behind the same check.
"""
from __future__ import annotations

import asyncio
import socket
import time
import urllib.request

import httpcore
import httpx

from . import addresses, http1

# `_Pool` overrides httpcore's private pool bookkeeping (`_assign_requests_to_connections` and
# the `_connections` / `_requests` lists it works on) and `endpoint_transport` replaces the
# pool of httpx's transport: both are written against this httpcore, pinned in requirements.txt.
# tests/test_engine_client.py fails when another one is installed: read its
# `_async/connection_pool.py` before moving the pin.
HTTPCORE_VERSION = "1.0.9"


def endpoint_transport(base_url: str, limits: httpx.Limits,
                       policy: addresses.AddressPolicy) -> httpx.AsyncBaseTransport | None:
    """The transport for one endpoint: http1.Transport for a plain-HTTP target on Linux,
    httpx's on anyio's backend otherwise (https), each behind `policy`; None (httpx's default
    transport, which honours the proxy settings) when a proxy from the environment applies to
    the target."""
    try:
        url = httpx.URL(base_url)
    except (httpx.InvalidURL, ValueError, TypeError):
        url = None  # the client's preflight refuses it before any request
    if url is not None and url.scheme in ("http", "https"):
        proxies = urllib.request.getproxies_environment()
        if ((proxies.get(url.scheme) or proxies.get("all"))
                and not urllib.request.proxy_bypass_environment(url.host)):
            return None
    if url is not None and url.scheme == "http" and http1.SUPPORTED:
        return http1.Transport(checked_connector(policy), limits)
    transport = httpx.AsyncHTTPTransport(limits=limits)
    transport._pool = _Pool(
        ssl_context=httpx.create_ssl_context(),
        max_connections=limits.max_connections, max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry, http1=True, http2=False,
        network_backend=CheckedBackend(policy))
    return transport


class AddressRefused(httpcore.ConnectError):
    """The endpoint's host is, or resolves to, an address the policy refuses."""


async def _checked_addresses(host: str, port: int, policy: addresses.AddressPolicy) -> list[tuple]:
    """getaddrinfo's answers for host:port, all of them allowed by `policy`."""
    try:
        infos = await addresses.getaddrinfo(host, port)
    except OSError as exc:  # name resolution
        raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
    problem = policy.resolved_problem(host, [info[4][0] for info in infos])
    if problem:
        raise AddressRefused(f"refused: {problem}")
    return infos


class CheckedBackend(httpcore.AsyncNetworkBackend):
    """anyio's network backend (TLS included), connecting only to addresses `policy` allows:
    the name is resolved and checked here, and anyio is given the checked address, so it
    never looks the name up again. TLS still uses the URL's host name (httpcore passes it to
    start_tls as server_hostname), so certificates are verified against that name."""

    def __init__(self, policy: addresses.AddressPolicy, inner: httpcore.AsyncNetworkBackend | None = None):
        self.policy = policy
        self.inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        try:
            async with asyncio.timeout_at(deadline):
                infos = await _checked_addresses(host, port, self.policy)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"timed out resolving {host}") from exc
        last: Exception | None = None
        for *_, sockaddr in infos:
            left = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                return await self.inner.connect_tcp(sockaddr[0], port, timeout=left, local_address=local_address,
                                                    socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        raise last or httpcore.ConnectError(f"cannot connect to {host}:{port}")

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise httpcore.ConnectError("unix sockets are not supported for endpoints")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _Pool(httpcore.AsyncConnectionPool):
    """httpcore's pool, with its bookkeeping in about linear time and no retry cascades.

    httpcore 1.0 runs its bookkeeping on every request and every response close: it scans every
    connection (closed? expired? idle?) and, for each queued request, picks the first connection
    that says it is available. Two costs follow at hundreds of streams. The scan itself is
    several method calls per connection per call. And an HTTP/1.1 connection still "available"
    because the request just given to it has not started yet is given to the next queued request
    too: that one fails with ConnectionNotAvailable and queues again, and when a closed loop's
    streams all finish together (fixed lengths keep them in step) the burst of new requests goes
    through that cascade, about ten bookkeeping passes per request (measured: 8,275 passes for
    800 requests at 256 streams, half of the client's CPU).

    Same rules, cheaper: a connection already given to a live request (HTTP/1.1: one at a time)
    is never given to another; closed and expired connections are dropped on a sweep at most
    every SWEEP_S, or at once when a queued request finds nothing free (so the pool's limit is
    never reached because of dead connections); idle ones beyond the keep-alive limit are
    closed on the sweep; a queued request gets the first free connection (an idle one the server
    closed is dropped when met), else a new one (closing an idle one to make room at the limit)."""

    SWEEP_S = 0.5
    _next_sweep = 0.0

    def _sweep(self, closing: list) -> None:
        kept = []
        count = len(self._connections)
        for connection in self._connections:
            if connection.is_closed():
                count -= 1
            elif connection.has_expired():
                count -= 1
                closing.append(connection)
            elif connection.is_idle() and count > self._max_keepalive_connections:
                count -= 1
                closing.append(connection)
            else:
                kept.append(connection)
        self._connections[:] = kept  # the connections created later must join the pool itself
        self._next_sweep = time.monotonic() + self.SWEEP_S

    def _assign_requests_to_connections(self) -> list:
        closing: list = []
        swept = time.monotonic() >= self._next_sweep
        if swept:
            self._sweep(closing)
        requests = self._requests
        queued = [r for r in requests if r.connection is None]
        if not queued:
            return closing
        taken = {id(r.connection) for r in requests if r.connection is not None}
        connections = self._connections
        for pool_request in queued:
            origin = pool_request.request.url.origin
            connection = _free(connections, taken, origin, closing)
            if connection is None and not swept:
                swept = True
                self._sweep(closing)
                connection = _free(connections, taken, origin, closing)
            if connection is None:
                if len(connections) >= self._max_connections:
                    idle = next((c for c in connections if id(c) not in taken and c.is_idle()), None)
                    if idle is None:
                        continue
                    connections.remove(idle)
                    closing.append(idle)
                connection = self.create_connection(origin)
                connections.append(connection)
            pool_request.assign_to_connection(connection)
            taken.add(id(connection))
        return closing


def _free(connections: list, taken: set, origin, closing: list):
    """The first connection to `origin` that no live request holds and that can take one now.
    Idle ones the server has closed since the last sweep leave the pool for `closing` when met:
    a request given one fails at once ("server disconnected without sending a response"), and
    its retry may meet a sibling closed at the same moment (llama-server in rate mode: the
    first request of a level failed both times). Keep-alive expiry stays the sweep's."""
    found, expired = None, []
    for c in connections:
        if id(c) in taken or not c.can_handle_request(origin):
            continue
        if c.is_idle() and _server_closed(c):
            expired.append(c)
        elif c.is_available():
            found = c
            break
    for c in expired:
        connections.remove(c)
        closing.append(c)
    return found


def _server_closed(connection) -> bool:
    """Whether an idle connection's socket has something to read, i.e. the server closed it
    (httpcore's own test in has_expired, without the keep-alive clock)."""
    inner = getattr(connection, "_connection", connection)  # AsyncHTTPConnection wraps the HTTP/1.1 one
    stream = getattr(inner, "_network_stream", None)
    return stream is not None and bool(stream.get_extra_info("is_readable"))


def checked_connector(policy: addresses.AddressPolicy) -> http1.Connector:
    """http1's way to connect: `host` resolved and checked against `policy`, then a
    non-blocking TCP connection to the first checked address that answers."""

    async def connect(host: str, port: int, timeout: float | None) -> socket.socket:
        loop = asyncio.get_running_loop()
        last: OSError | None = None
        try:
            async with asyncio.timeout(timeout):
                try:
                    infos = await _checked_addresses(host, port, policy)
                except httpcore.ConnectError as exc:
                    raise httpx.ConnectError(str(exc)) from exc
                for family, kind, proto, _, addr in infos:
                    sock = socket.socket(family, kind, proto)
                    try:
                        sock.setblocking(False)
                        await loop.sock_connect(sock, addr)
                    except OSError as exc:
                        sock.close()
                        last = exc
                        continue
                    except BaseException:
                        sock.close()
                        raise
                    return sock
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"timed out connecting to {host}:{port}") from exc
        raise httpx.ConnectError(str(last) if last else f"cannot connect to {host}:{port}")

    return connect
