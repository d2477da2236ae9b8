"""Plain-HTTP endpoints over a small HTTP/1.1 client of our own: each response parsed, and its
server-sent events framed, in the process's one socket-reading thread as its bytes arrive,
every event kept with the kernel's receive time of the bytes that completed it.

Why not httpx → httpcore → h11 for these: the measuring loop's every chunk went through six
async generators and h11's pure-Python state machine (with its wake-up of the event loop),
and every request through httpx's request building, auth and redirect steps and httpcore's
pool: on the 2-core test machine 187–194 µs of client CPU per chunk at 64 streams and ~2 ms
per one-token request, against 57–62 µs and ~0.4 ms here (scripts/bench_client_cpu.py;
ACCURACY.md, "A client below httpx"). Here the thread hands each read to httptools (llhttp,
Node.js's HTTP parser, in C: status line, headers, chunked and Content-Length bodies,
keep-alive) and feeds the body to the SSE framer (stream.py); the event loop is woken only
when a response's headers are in and when it has ended (or failed), not per chunk, and builds
each request's bytes itself. What it covers is what the load
generator sends: GET/POST with a known body, HTTP/1.1 keep-alive, responses with a
Content-Length, chunked or ending with the connection. httpx stays the API for every other
call (the `Transport` below plugs this client into it) and for HTTPS and proxies
(transport.py).

Timing (as before, in this module since its reads are parsed here): the thread waits in epoll
and reads each socket the moment bytes arrive (recvmsg with SO_TIMESTAMPNS), so a chunk is
timed when it reached the socket, not when a busy event loop got round to it; chunks read
together share the time of the latest. A request's send time is taken just before its
send() call.
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
from typing import Awaitable, Callable

import httptools
import httpx

from .stream import DONE, MAX_EVENT_BYTES, SSEFramer, event_stream_problem

_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else None)
_CMSG_SPACE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0  # one timespec
_TIMESPEC = struct.Struct("@ll")  # struct timespec
_READ_SIZE = 65536
_MAX_BUFFERED = 1 << 20  # stop reading the socket (backpressure) past this much unread body
# After [DONE], how long the end of the body may take before the connection is given up
# (normally it came with [DONE]); the request has its answer either way.
DRAIN_S = 1.0

SUPPORTED = (_SO_TIMESTAMPNS is not None and hasattr(socket.socket, "recvmsg") and hasattr(select, "epoll"))

Connector = Callable[[str, int, "float | None"], Awaitable[socket.socket]]


def _clocks(tries: int = 3) -> tuple[float, float]:
    """perf_counter and the wall clock read as one instant: a pair read across a preemption would
    date the kernel's receive stamp that much too early, so a pair more than 0.2 ms apart is read
    again (the closest pair is kept)."""
    best = None
    for _ in range(tries):
        before = time.perf_counter()
        wall = time.time()
        after = time.perf_counter()
        if best is None or after - before < best[0]:
            best = (after - before, (before + after) / 2, wall)
        if after - before < 2e-4:
            break
    return best[1], best[2]

class Response:
    """The response in flight on a Connection, filled by the reader thread (httptools calls
    these on_* methods from feed_data). With `events`, a 200 text/event-stream body is framed
    as it comes (`times`, `datas`: each event's data and the arrival time of its bytes, seconds
    after `sent`), up to [DONE]; any other body is kept as it came (`pieces`)."""

    def __init__(self, events: bool, max_event_bytes: int = MAX_EVENT_BYTES):
        self.events = events
        self.max_event_bytes = max_event_bytes
        self.sent = 0.0  # just before the request's first send() (perf_counter)
        self.now = 0.0  # arrival time of the piece being parsed, after `sent`
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.headers_done = False
        self.complete = False
        self.keep_alive = True
        self.until_close = False  # no length and not chunked: the body ends with the connection
        self.interim = False  # a 1xx response is being parsed; the real one follows it
        self.extra = False  # bytes after the end of the response: the connection cannot be reused
        self.framer: SSEFramer | None = None
        self.problem = ""  # why a 200 asked for as an event stream is not one
        self.times: list[float] = []
        self.datas: list[bytes] = []
        self.done = False  # [DONE] seen
        self.pieces: collections.deque[bytes] = collections.deque()
        self.received = 0  # body bytes kept in `pieces`: written by the reader thread only
        self.consumed = 0  # ... and taken from them: by the event loop only
        self.error: Exception | None = None
        self.parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)

    def header(self, name: bytes) -> str:
        name = name.lower()
        return next((v.decode("latin-1") for k, v in self.headers if k.lower() == name), "")

    # ------------------------------------------------ httptools callbacks (reader thread)
    def on_message_begin(self) -> None:
        if self.complete:
            self.extra = True

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.headers_done:  # (trailers after a chunked body are not headers)
            self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:  # 100 Continue, 103 Early Hints: the response follows
            self.interim, self.headers, self.reason = True, [], b""
            return
        self.status = status
        self.keep_alive = self.parser.should_keep_alive()
        names = {k.lower() for k, _ in self.headers}
        self.until_close = (b"content-length" not in names and b"transfer-encoding" not in names
                            and status not in (204, 304))
        if self.events and status == 200:
            encoding = self.header(b"content-encoding")
            self.problem = event_stream_problem(self.header(b"content-type")) or (
                f"the stream came compressed (Content-Encoding: {encoding}), which was not asked for"
                if encoding not in ("", "identity") else "")
            if not self.problem:
                self.framer = SSEFramer(self.max_event_bytes)
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        if self.framer is None:
            self.pieces.append(body)
            self.received += len(body)
            return
        if self.done:
            return  # what follows [DONE] is not read
        for data in self.framer.feed(body):
            if len(data) < 16 and data.strip() == DONE:
                self.done = True
                return
            if data:
                self.times.append(self.now)
                self.datas.append(data)

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
            return
        self.complete = True


class Connection:
    """One keep-alive HTTP/1.1 connection, read by the _SocketReader thread the moment bytes
    arrive: what arrives is parsed into the Response in flight (`response`)."""

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop):
        self.sock = sock
        self.loop = loop
        self.fd = sock.fileno()
        self.response: Response | None = None
        self.last_arrival = time.perf_counter()  # of any byte, or when the latest request left
        self.expire_at = 0.0
        self.requests = 0
        self.eof = False
        self.error: OSError | None = None
        self.unexpected = False  # bytes arrived with no response awaited: not reusable
        self._waiter: asyncio.Future | None = None
        self._until: Callable[[], bool] | None = None
        self._paused = False
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        self._reader = _SocketReader.get()
        self._reader.add(self)

    # ---------------------------------------------------------------- reader thread
    def _receive(self) -> bool:
        """Read what arrived and parse it; True when a waiting coroutine must wake."""
        try:
            data, ancdata, _, _ = self.sock.recvmsg(_READ_SIZE, _CMSG_SPACE)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as exc:
            data, ancdata = b"", ()
            self.error = exc
        now, wall = _clocks()
        for _, _, raw in ancdata:  # SCM_TIMESTAMPNS, the only one asked for
            if len(raw) >= _TIMESPEC.size:
                sec, nsec = _TIMESPEC.unpack_from(raw)
                age = wall - (sec + nsec * 1e-9)  # how long the bytes waited for us
                if 0.0 <= age < 60.0:
                    now -= age
        response = self.response
        if data:
            self.last_arrival = now
            if response is None or response.parser is None or response.error is not None:
                self.unexpected = True
            else:
                response.now = now - response.sent
                try:
                    response.parser.feed_data(data)
                except httptools.HttpParserCallbackError as exc:  # the framer refused the stream
                    response.error = exc.__context__ or httpx.RemoteProtocolError(str(exc))
                except httptools.HttpParserUpgrade:
                    response.error = httpx.RemoteProtocolError("the server switched protocols (not supported)")
                except httptools.HttpParserError as exc:
                    response.error = httpx.RemoteProtocolError(f"malformed HTTP response: {exc}")
                if response.received - response.consumed > _MAX_BUFFERED and not self._paused:
                    self._paused = True
                    self._reader.pause(self, True)
        else:
            self.eof = True
            self._reader.remove(self)
            if response is not None and response.headers_done and response.until_close:
                response.complete, response.keep_alive = True, False
        until = self._until
        return self._waiter is not None and (until is None or until())

    # ---------------------------------------------------------------- event loop
    def _ended(self) -> bool:
        return self.eof or self.error is not None or self.fd < 0

    # What a waiting coroutine waits for (also asked by the reader thread; no response: closed).
    def _headers_in(self) -> bool:
        r = self.response
        return r is None or r.headers_done or r.error is not None or self._ended() or self.unexpected

    def _piece_in(self) -> bool:
        r = self.response
        return r is None or bool(r.pieces) or r.complete or r.error is not None or self._ended()

    def _events_over(self) -> bool:
        r = self.response
        return r is None or r.complete or r.done or r.error is not None or self._ended()

    def _body_over(self) -> bool:
        r = self.response
        return r is None or r.complete or r.error is not None or self._ended()

    async def _wait(self, ready: Callable[[], bool], timeout: float | None) -> None:
        """Until `ready()` (the reader thread makes it so), or ReadTimeout after `timeout`
        seconds without a byte."""
        while not ready():
            waiter = self.loop.create_future()
            self._until = ready
            self._waiter = waiter
            timer = None
            try:
                if ready():  # the reader thread may have got there before it saw the waiter
                    break
                if timeout is not None:
                    left = self.last_arrival + timeout - time.perf_counter()
                    if left <= 0:
                        raise httpx.ReadTimeout("timed out")
                    timer = self.loop.call_later(left, _wake, waiter)
                await waiter
            finally:
                self._waiter = self._until = None
                if timer is not None:
                    timer.cancel()

    def _failure(self, response: Response) -> Exception | None:
        """Why `response` cannot go on (None: it can)."""
        if response.error is not None:
            return response.error
        if self.error is not None:
            return httpx.ReadError(str(self.error))
        if self.fd < 0:
            return httpx.ReadError("connection closed")
        if response.complete:
            return None
        if not response.headers_done and (self.eof or self.unexpected):
            return httpx.RemoteProtocolError("Server disconnected without sending a response.")
        if self.eof:
            return httpx.RemoteProtocolError("peer closed connection without sending complete message body")
        return None

    async def request(self, head: bytes, body: bytes, events: bool, timeout: httpx.Timeout | dict) -> Response:
        """Send one request and wait for its response's headers (not its body)."""
        timeouts = timeout if isinstance(timeout, dict) else timeout.as_dict()
        response = self.response = Response(events)
        self.requests += 1
        self.last_arrival = time.perf_counter()  # the silence before the answer counts from here
        await self._write(head + body if body else head, response, timeouts.get("write"))
        await self._wait(self._headers_in, timeouts.get("read"))
        failure = self._failure(response)
        if failure is not None and not response.headers_done:
            raise failure
        return response  # (a body cut short is for its reader to report, with what came of it)

    async def _write(self, data: bytes, response: Response, timeout: float | None) -> None:
        view = memoryview(data)
        response.sent = time.perf_counter()
        while view:
            try:
                sent = self.sock.send(view)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                # The server may have answered (an error) and closed before reading it all, or
                # have closed an idle connection: what the response says is read next.
                return
            view = view[sent:]
            if view:
                waiter = self.loop.create_future()
                self.loop.add_writer(self.fd, _wake, waiter)
                timer = self.loop.call_later(timeout, _expire, waiter) if timeout else None
                try:
                    await waiter
                finally:
                    self.loop.remove_writer(self.fd)
                    if timer is not None:
                        timer.cancel()

    async def read_events(self, timeout: float | None) -> None:
        """Wait for the end of an event stream's response (its events are in `response.times`
        and `.datas` as they come): the end of its body, or [DONE] and then its end (for at most
        DRAIN_S). Raises what cut it short (StreamError, httpx.ReadTimeout, RemoteProtocolError,
        ReadError)."""
        response = self.response
        await self._wait(self._events_over, timeout)
        failure = self._failure(response)
        if failure is not None and not response.done:
            raise failure
        if response.done and not response.complete and failure is None:
            try:
                async with asyncio.timeout(DRAIN_S):
                    await self._wait(self._body_over, None)
            except TimeoutError:
                pass  # a server that never ends the body: the connection is closed, not reused

    async def read_piece(self, timeout: float | None) -> bytes:
        """The next piece of a plain body (b'' at its end)."""
        response = self.response
        if not response.pieces:
            await self._wait(self._piece_in, timeout)
            if not response.pieces:
                failure = self._failure(response)
                if failure is not None:
                    raise failure
                return b""
        data = response.pieces.popleft()
        response.consumed += len(data)
        if self._paused and response.received - response.consumed <= _MAX_BUFFERED // 2:
            self._paused = False
            self._reader.pause(self, False)
        return data

    def reusable(self) -> bool:
        """Whether the response is over, read to its end, and the connection fit for another."""
        r = self.response
        return (r is not None and r.complete and r.keep_alive and not r.extra and r.error is None
                and not self._ended() and not self.unexpected)

    def stale(self) -> bool:
        """Whether this idle connection can no longer take a request (closed by the server, or
        past its keep-alive)."""
        return self._ended() or self.unexpected or time.monotonic() >= self.expire_at

    def close(self) -> None:
        response, self.response = self.response, None
        if response is not None:
            response.parser = None  # (the parser refers to its response: no cycle left for the GC)
        if self.fd >= 0:
            self._reader.remove(self)
            self.fd = -1
            self.sock.close()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class Pool:
    """Connections to one origin: at most `max_connections` open, idle ones reused (the most
    recent first) for `keepalive_expiry` s, a request past the limit waiting for one to free.
    `connect(host, port, timeout)` opens a connected non-blocking socket (transport.py: to the
    checked address only)."""

    def __init__(self, host: str, port: int, connect: Connector, limits: httpx.Limits):
        self.host, self.port, self.connect = host, port, connect
        self.max_connections = limits.max_connections or 1 << 30
        self.max_idle = limits.max_keepalive_connections if limits.max_keepalive_connections is not None else 1 << 30
        self.keepalive_expiry = limits.keepalive_expiry if limits.keepalive_expiry is not None else 1e9
        self.idle: list[Connection] = []
        self.open: set[Connection] = set()
        self.opening = 0
        self.waiters: collections.deque[asyncio.Future] = collections.deque()

    async def acquire(self, timeouts: dict) -> Connection:
        while True:
            while self.idle:
                connection = self.idle.pop()
                if not connection.stale():
                    return connection
                self._drop(connection)
            if len(self.open) + self.opening < self.max_connections:
                return await self._connect(timeouts.get("connect"))
            waiter = asyncio.get_running_loop().create_future()
            self.waiters.append(waiter)
            try:
                async with asyncio.timeout(timeouts.get("pool")):
                    await waiter
            except BaseException as exc:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # it was this one's turn: pass it on
                if isinstance(exc, TimeoutError):
                    raise httpx.PoolTimeout("timed out waiting for a free connection") from None
                raise
            finally:
                if not waiter.done():
                    self.waiters.remove(waiter)

    async def send(self, head: bytes, body: bytes, events: bool, timeouts: dict) -> tuple[Connection, Response]:
        """On a connection (free, else new): the request sent and its response's headers in."""
        connection = await self.acquire(timeouts)
        try:
            return connection, await connection.request(head, body, events, timeouts)
        except BaseException:
            self.release(connection)
            raise

    async def _connect(self, timeout: float | None) -> Connection:
        self.opening += 1
        try:
            sock = await self.connect(self.host, self.port, timeout)
        except BaseException:
            self.opening -= 1
            self._wake_one()
            raise
        self.opening -= 1
        connection = Connection(sock, asyncio.get_running_loop())
        self.open.add(connection)
        return connection

    def release(self, connection: Connection) -> None:
        """Back to the pool when it can take another request, else closed."""
        if connection.reusable() and len(self.idle) < self.max_idle:
            connection.response.parser = None
            connection.response = None
            connection.expire_at = time.monotonic() + self.keepalive_expiry
            self.idle.append(connection)
        else:
            self._drop(connection)
        self._wake_one()

    def _drop(self, connection: Connection) -> None:
        connection.close()
        self.open.discard(connection)

    def _wake_one(self) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def close(self) -> None:
        for connection in list(self.open):
            self._drop(connection)
        self.idle.clear()


def _check_header(name: bytes, value: bytes) -> None:
    if not name or any(c in name for c in b" \t\r\n:\0") or any(c in value for c in b"\r\n\0"):
        raise httpx.LocalProtocolError(f"Illegal header: {name!r}: {value!r}")


def request_head(method: bytes, target: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    """A request's line and header lines, each header checked (no CR, LF or NUL can smuggle
    another); the blank line that ends them is the caller's to add."""
    lines = [method, b" ", target, b" HTTP/1.1\r\n"]
    for name, value in headers:
        _check_header(name, value)
        lines += (name, b": ", value, b"\r\n")
    return b"".join(lines)


class Transport(httpx.AsyncBaseTransport):
    """httpx's transport for plain-HTTP endpoints, over this module's connections: every call
    an httpx client makes (preflight, tokenize, metrics) shares the pools with the measuring
    loop's `stream_events`, one pool per origin."""

    def __init__(self, connect: Connector, limits: httpx.Limits):
        self.connect, self.limits = connect, limits
        self.pools: dict[tuple, Pool] = {}

    def pool(self, url: httpx.URL) -> Pool:
        key = (url.host, url.port or 80)
        pool = self.pools.get(key)
        if pool is None:
            pool = self.pools[key] = Pool(url.host, url.port or 80, self.connect, self.limits)
        return pool

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"{request.url.scheme} is not served by this transport")
        if request.method in ("HEAD", "CONNECT"):
            raise httpx.UnsupportedProtocol(f"{request.method} is not supported by this transport")
        body = b"".join([part async for part in request.stream])
        headers = request.headers.raw
        if any(k.lower() == b"transfer-encoding" for k, _ in headers):
            body = (b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)) if body else b"0\r\n\r\n"
        head = request_head(request.method.encode(), request.url.raw_path, headers) + b"\r\n"
        pool = self.pool(request.url)
        timeouts = request.extensions.get("timeout", {})
        connection, response = await pool.send(head, body, False, timeouts)
        return httpx.Response(response.status, headers=response.headers,
                              stream=_Body(pool, connection, timeouts.get("read")),
                              extensions={"http_version": b"HTTP/1.1", "reason_phrase": response.reason.strip()})

    async def aclose(self) -> None:
        for pool in self.pools.values():
            pool.close()


class _Body(httpx.AsyncByteStream):
    def __init__(self, pool: Pool, connection: Connection, timeout: float | None):
        self.pool, self.connection, self.timeout = pool, connection, timeout
        self.closed = False

    async def __aiter__(self):
        while True:
            data = await self.connection.read_piece(self.timeout)
            if not data:
                return
            yield data

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            self.pool.release(self.connection)


class EventExchange:
    """One streamed request of the measuring loop, outside httpx (`stream_events`): the
    response's status and headers are in, its events come into `response.times` / `.datas`.
    `close()` gives the connection back (or closes it when the response was cut short)."""

    def __init__(self, pool: Pool, connection: Connection, response: Response, read_timeout: float | None):
        self.pool, self.connection, self.response, self.read_timeout = pool, connection, response, read_timeout

    async def read_events(self) -> None:
        await self.connection.read_events(self.read_timeout)

    async def read_body(self, limit: int) -> bytes:
        """The first `limit` bytes of a plain body (an error's text), read to its end so that
        the connection can be reused."""
        out = b""
        while data := await self.connection.read_piece(self.read_timeout):
            if len(out) < limit:
                out += data
        return out[:limit]

    def close(self) -> None:
        if self.connection is not None:
            self.pool.release(self.connection)
            self.connection = None


async def stream_events(transport: Transport, url: httpx.URL, head: bytes, body: bytes,
                        timeouts: dict) -> EventExchange:
    """Send a request whose answer should be an event stream, on `transport`'s pool for `url`
    (`head`: its request line and headers, from request_head), and return once the response's
    headers are in."""
    pool = transport.pool(url)
    connection, response = await pool.send(head, body, True, timeouts)
    return EventExchange(pool, connection, response, timeouts.get("read"))


def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_exception(httpx.WriteTimeout("timed out"))


class _SocketReader:
    """The process's one socket-reading thread for every Connection: it waits in epoll and
    reads each socket as soon as bytes arrive (recvmsg, with the kernel's receive time), so
    that bytes are timed when they came even while the event loop is busy (it only needs the
    GIL, which a busy thread hands over every few milliseconds). A read that finds several
    chunks queued can only time them all at the latest one's arrival: reading at once keeps
    chunks apart. The event loop is woken once per batch."""

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
        self.connections: dict[int, Connection] = {}
        self.thread = threading.Thread(target=self._run, name="timed-socket-reader", daemon=True)
        self.thread.start()

    def add(self, connection: Connection) -> None:
        self.connections[connection.fd] = connection
        self.epoll.register(connection.fd, select.EPOLLIN)

    def pause(self, connection: Connection, paused: bool) -> None:
        try:
            self.epoll.modify(connection.fd, 0 if paused else select.EPOLLIN)
        except (OSError, ValueError):
            pass

    def remove(self, connection: Connection) -> None:
        if self.connections.get(connection.fd) is connection:  # (called by both threads: pop, not del)
            self.connections.pop(connection.fd, None)
            try:
                self.epoll.unregister(connection.fd)
            except (OSError, ValueError):
                pass

    def _run(self) -> None:
        connections, poll = self.connections, self.epoll.poll
        while True:
            try:
                events = poll()
            except InterruptedError:
                continue
            for fd, _ in events:
                connection = connections.get(fd)
                if connection is None:
                    continue
                try:
                    wake = connection._receive()
                except Exception as exc:  # a bug fails its own request, not every connection's reads
                    connection.error = OSError(f"reading the response failed: {exc!r}")
                    self.remove(connection)
                    wake = connection._waiter is not None
                if wake:
                    _Wakeups.of(connection.loop).add(connection)


class _Wakeups:
    """The connections of one event loop with a coroutine to wake, handed over in batches: the
    reader thread adds to the batch, and only the first addition since the loop last took it
    costs a call_soon_threadsafe (a write to the loop's self-pipe). While the loop is busy, the
    batch grows instead of the system calls."""

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
        self.connections: list[Connection] = []
        self.scheduled = False
        self.lock = threading.Lock()

    def add(self, connection: Connection) -> None:
        with self.lock:
            self.connections.append(connection)
            if self.scheduled:
                return
            self.scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # that event loop is closed
            pass

    def _wake(self) -> None:
        with self.lock:
            connections, self.connections, self.scheduled = self.connections, [], False
        for connection in connections:
            waiter = connection._waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
