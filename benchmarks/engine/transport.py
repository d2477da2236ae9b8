"""The client's transports for httpx/httpcore: every connection checked, plain HTTP timed.

Every connection to an endpoint goes through an address check (addresses.py): the host is
resolved when the worker connects, refused when any of its addresses is (a link-local or
metadata address, one outside the allowed networks...), and the connection is made to the
addresses just checked, never to a second lookup. TLS still names and verifies the URL's
host. A worker that reaches endpoints through a proxy (HTTP_PROXY and the like, unless
NO_PROXY covers the host) leaves resolution to the proxy: only the URL check applies then.

Plain-HTTP connections use our own small network backend for httpcore instead of anyio's:
every read takes the kernel's receive timestamp of its bytes (SO_TIMESTAMPNS), and a thread
reads the sockets as soon as bytes arrive, so a chunk is timed when it reached the socket,
not when our event loop got round to parsing it (a client busy with hundreds of streams, or
one the OS did not schedule for a few milliseconds, no longer inflates TTFT and ITL); a
request's send time is taken just before its send() call, with no await in between; and the
per-read path is lighter (no cancel scope and no epoll re-registration per read). HTTPS and
systems without SO_TIMESTAMPNS or epoll keep anyio's backend, behind the same check.
"""
from __future__ import annotations

import asyncio
import collections
import select
import socket
import struct
import sys
import threading
import time
import urllib.request

import httpcore
import httpx

from . import addresses

_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else None)
_SCM_TIMESTAMPNS = _SO_TIMESTAMPNS
_CMSG_SPACE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0  # one timespec
_TIMESPEC = struct.Struct("@ll")  # struct timespec
_READ_SIZE = 65536
_MAX_BUFFERED = 1 << 20  # stop reading the socket (backpressure) past this much unread data

# `_Pool` overrides httpcore's private pool bookkeeping (`_assign_requests_to_connections` and
# the `_connections` / `_requests` lists it works on) and `endpoint_transport` replaces the
# pool of httpx's transport: both are written against this httpcore, pinned in requirements.txt.
# tests/test_engine_client.py fails when another one is installed: read its
# `_async/connection_pool.py` before moving the pin.
HTTPCORE_VERSION = "1.0.9"


def endpoint_transport(base_url: str, limits: httpx.Limits,
                       policy: addresses.AddressPolicy) -> httpx.AsyncHTTPTransport | None:
    """The transport for one endpoint: TimedBackend for a plain-HTTP target on Linux, anyio's
    backend otherwise (https), each behind `policy`; None (httpx's default transport, which
    honours the proxy settings) when a proxy from the environment applies to the target."""
    try:
        url = httpx.URL(base_url)
    except (httpx.InvalidURL, ValueError, TypeError):
        url = None  # the client's preflight refuses it before any request
    if url is not None and url.scheme in ("http", "https"):
        proxies = urllib.request.getproxies_environment()
        if ((proxies.get(url.scheme) or proxies.get("all"))
                and not urllib.request.proxy_bypass_environment(url.host)):
            return None
    timed = (url is not None and url.scheme == "http" and _SO_TIMESTAMPNS is not None
             and hasattr(socket.socket, "recvmsg") and hasattr(select, "epoll"))
    transport = httpx.AsyncHTTPTransport(limits=limits)
    transport._pool = _Pool(
        ssl_context=None if timed else httpx.create_ssl_context(),
        max_connections=limits.max_connections, max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry, http1=True, http2=False,
        network_backend=TimedBackend(policy) if timed else CheckedBackend(policy))
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


class TimedBackend(httpcore.AsyncNetworkBackend):
    """httpcore network backend on plain non-blocking asyncio sockets (TCP only), connecting
    only to addresses `policy` allows (checked, then connected to, as resolved)."""

    def __init__(self, policy: addresses.AddressPolicy | None = None):
        self.policy = policy or addresses.AddressPolicy()

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                infos = await _checked_addresses(host, port, self.policy)
                last: OSError | None = None
                for family, kind, proto, _, addr in infos:
                    sock = socket.socket(family, kind, proto)
                    try:
                        sock.setblocking(False)
                        for option in socket_options or ():
                            sock.setsockopt(*option)
                        if local_address:
                            sock.bind((local_address, 0))
                        await loop.sock_connect(sock, addr)
                    except OSError as exc:
                        sock.close()
                        last = exc
                        continue
                    except BaseException:
                        sock.close()
                        raise
                    return TimedStream(sock, loop)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"timed out connecting to {host}:{port}") from exc
        raise httpcore.ConnectError(str(last) if last else f"cannot connect to {host}:{port}")

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise httpcore.ConnectError("unix sockets are not supported by TimedBackend")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _SocketReader:
    """The process's one socket-reading thread for every TimedStream: it waits in epoll and
    reads each socket as soon as bytes arrive (recvmsg, with the kernel's receive time), so
    that bytes are timed when they came even while the event loop is busy parsing other
    streams (it only needs the GIL, which a busy thread hands over every few milliseconds).
    A read that finds several chunks queued can only time them all at the latest one's
    arrival: reading at once keeps chunks apart. The event loop is woken once per batch."""

    _instance: "_SocketReader | None" = None
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> "_SocketReader":
        with cls._lock:
            if cls._instance is None or not cls._instance.thread.is_alive():
                cls._instance = cls()
            return cls._instance

    def __init__(self):
        self.epoll = select.epoll()
        self.streams: dict[int, TimedStream] = {}
        self.thread = threading.Thread(target=self._run, name="timed-socket-reader", daemon=True)
        self.thread.start()

    def add(self, stream: "TimedStream") -> None:
        self.streams[stream.fd] = stream
        self.epoll.register(stream.fd, select.EPOLLIN)

    def pause(self, stream: "TimedStream", paused: bool) -> None:
        try:
            self.epoll.modify(stream.fd, 0 if paused else select.EPOLLIN)
        except (OSError, ValueError):
            pass

    def remove(self, stream: "TimedStream") -> None:
        if self.streams.get(stream.fd) is stream:  # (called by both threads: pop, not del)
            self.streams.pop(stream.fd, None)
            try:
                self.epoll.unregister(stream.fd)
            except (OSError, ValueError):
                pass

    def _run(self) -> None:
        streams, poll = self.streams, self.epoll.poll
        while True:
            try:
                events = poll()
            except InterruptedError:
                continue
            for fd, _ in events:
                stream = streams.get(fd)
                if stream is not None and stream._receive():
                    _Wakeups.of(stream.loop).add(stream)


class _Wakeups:
    """The streams of one event loop with a read() to wake, handed over in batches: the reader
    thread adds to the batch, and only the first addition since the loop last took it costs a
    call_soon_threadsafe (a write to the loop's self-pipe). While the loop is busy, the batch
    grows instead of the system calls."""

    _by_loop: "dict[asyncio.AbstractEventLoop, _Wakeups]" = {}

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> "_Wakeups":
        wakeups = cls._by_loop.get(loop)
        if wakeups is None:
            for old in [lp for lp in cls._by_loop if lp.is_closed()]:
                del cls._by_loop[old]
            wakeups = cls._by_loop[loop] = cls(loop)
        return wakeups

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.streams: list[TimedStream] = []
        self.scheduled = False
        self.lock = threading.Lock()

    def add(self, stream: "TimedStream") -> None:
        with self.lock:
            self.streams.append(stream)
            if self.scheduled:
                return
            self.scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # that event loop is closed
            pass

    def _wake(self) -> None:
        with self.lock:
            streams, self.streams, self.scheduled = self.streams, [], False
        for stream in streams:
            waiter = stream._waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)


class TimedStream(httpcore.AsyncNetworkStream):
    """One TCP connection, read by the _SocketReader thread the moment bytes arrive, each
    piece kept with the monotonic time its bytes reached the socket.

    `arrived`: arrival time (time.perf_counter clock) of the bytes most recently returned by
    read(); pieces read together share the time of the latest of them.
    `request_written`: time just before the first send() of the latest request."""

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop):
        self.sock = sock
        self.loop = loop
        self.fd = sock.fileno()
        self.arrived: float = time.perf_counter()
        self.request_written: float | None = None
        self._pieces: collections.deque[tuple[bytes, float]] = collections.deque()
        self._received = 0  # bytes, written by the reader thread only
        self._consumed = 0  # bytes, written by the event loop only
        self._paused = False
        self._eof = False
        self._error: OSError | None = None
        self._waiter: asyncio.Future | None = None
        self._read_since_write = True
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        self._reader = _SocketReader.get()
        self._reader.add(self)

    # -------------------------------------------------------------- reading
    def _receive(self) -> bool:
        """In the reader thread: read what arrived; True when a waiting read() must wake."""
        try:
            data, ancdata, _, _ = self.sock.recvmsg(_READ_SIZE, _CMSG_SPACE)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as exc:
            data, ancdata = b"", ()
            self._error = exc
        now = time.perf_counter()
        for _, kind, raw in ancdata:
            if kind == _SCM_TIMESTAMPNS and len(raw) >= _TIMESPEC.size:
                sec, nsec = _TIMESPEC.unpack_from(raw)
                age = time.time() - (sec + nsec * 1e-9)  # how long the bytes waited for us
                if 0.0 <= age < 60.0:
                    now -= age
        if data:
            self._pieces.append((data, now))
            self._received += len(data)
            if self._received - self._consumed > _MAX_BUFFERED and not self._paused:
                self._paused = True
                self._reader.pause(self, True)
        else:
            self._eof = True
            self._reader.remove(self)
        return self._waiter is not None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self._read_since_write = True
        if not self._pieces:
            timer = None
            expired = [False]
            try:
                while not self._pieces:
                    if self._error is not None:
                        raise httpcore.ReadError(str(self._error))
                    if self._eof or self.fd < 0:
                        return b""
                    if expired[0]:
                        raise httpcore.ReadTimeout("timed out")
                    waiter = self._waiter = self.loop.create_future()
                    # The reader thread may have queued a piece before it could see the waiter.
                    if self._pieces or self._eof or self._error is not None:
                        break
                    if timeout and timer is None:
                        timer = self.loop.call_later(timeout, _expire_read, self, expired)
                    await waiter
            finally:
                self._waiter = None
                if timer is not None:
                    timer.cancel()
        data, self.arrived = self._pieces[0]
        if len(data) > max_bytes:
            self._pieces[0] = (data[max_bytes:], self.arrived)
            data = data[:max_bytes]
        else:
            self._pieces.popleft()
        self._consumed += len(data)
        if self._paused and self._received - self._consumed <= _MAX_BUFFERED // 2:
            self._paused = False
            self._reader.pause(self, False)
        return data

    # -------------------------------------------------------------- writing
    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        if self._read_since_write:
            self._read_since_write = False
            self.request_written = time.perf_counter()
        view = memoryview(buffer)
        while view:
            try:
                sent = self.sock.send(view)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                raise httpcore.WriteError(str(exc)) from exc
            view = view[sent:]
            if view:
                waiter = self.loop.create_future()
                self.loop.add_writer(self.fd, _wake, waiter)
                timer = self.loop.call_later(timeout, _expire, waiter, httpcore.WriteTimeout) if timeout else None
                try:
                    await waiter
                finally:
                    self.loop.remove_writer(self.fd)
                    if timer is not None:
                        timer.cancel()

    async def aclose(self) -> None:
        if self.fd >= 0:
            self._reader.remove(self)
            self.fd = -1
            self.sock.close()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        raise httpcore.ConnectError("TLS is not supported by TimedBackend")

    def get_extra_info(self, info: str):
        if info == "socket":
            return self.sock
        if info == "client_addr":
            return self.sock.getsockname()
        if info == "server_addr":
            return self.sock.getpeername()
        if info == "is_readable":
            # An idle keep-alive connection with something to read was closed by the server.
            # The reader thread reads every socket at once, so no system call is needed.
            return bool(self._pieces) or self._eof or self._error is not None or self.fd < 0
        return None


def _expire_read(stream: TimedStream, expired: list) -> None:
    expired[0] = True
    waiter = stream._waiter
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


def _expire(waiter: asyncio.Future, error: type[Exception]) -> None:
    if not waiter.done():
        waiter.set_exception(error("timed out"))


def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


