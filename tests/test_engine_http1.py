"""The engine's own HTTP/1.1 client (engine/http1.py), which carries the measured requests to
plain-HTTP endpoints: the same records as httpx's path, responses parsed however their bytes
are split, each event timed by the piece that completed it, and every way a response can fail
recorded with its cause."""
import asyncio
import json
import time

import httpx
import pytest
from hypothesis import given, settings, strategies as st

from benchmarks.engine import http1, transport
from benchmarks.engine.addresses import AddressPolicy
from benchmarks.engine.client import Load, Session, Target, Timeouts, Workload
from benchmarks.engine.metrics import percentile
from benchmarks.engine.simulator import prompt_key

HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
        b"Connection: keep-alive\r\n\r\n")


def event(k: int) -> bytes:
    payload = {"choices": [{"index": 0, "text": f" t{k}", "finish_reason": None}]}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def chunked(body_parts: list[bytes]) -> bytes:
    return b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in body_parts) + b"0\r\nX-Trailer: 1\r\n\r\n"


# ---------------------------------------------------------------- parsing, split anywhere
@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=6), st.data())
def test_a_response_split_at_any_byte_gives_the_same_events_each_timed_by_the_piece_that_ended_it(sizes, data):
    # Events spread over HTTP chunks of their own sizes (an event may span chunks, a chunk end
    # inside an event), then [DONE] and an event after it that must not be read.
    events = [event(k) for k in range(len(sizes))]
    body = b"".join(events) + b"data: [DONE]\n\n" + event(99)
    cuts, at = [], 0
    for size in sizes * 3:
        at += size * 7
        if at < len(body):
            cuts.append(at)
    parts = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)])]
    raw = HEAD + chunked(parts)
    splits = sorted(set(data.draw(st.lists(st.integers(1, len(raw) - 1), max_size=12))))
    pieces = [raw[a:b] for a, b in zip([0, *splits], [*splits, len(raw)])]

    response = http1.Response(events=True)
    for i, piece in enumerate(pieces):
        response.now = float(i)
        response.parser.feed_data(piece)
    assert response.headers_done and response.complete and response.keep_alive and response.done
    assert response.datas == [e[6:-2] for e in events]
    # The piece that held the last byte of each event's blank line (in the raw response).
    ends, offset = [], 0
    for e in events:
        offset = body.index(e, offset) + len(e)
        ends.append(offset)
    raw_ends = []
    for end in ends:  # the body offset's place in the raw chunked bytes
        skipped, position = 0, len(HEAD)
        for part in parts:
            header = b"%x;ext=1\r\n" % len(part)
            if skipped + len(part) >= end:
                raw_ends.append(position + len(header) + end - skipped - 1)
                break
            skipped += len(part)
            position += len(header) + len(part) + 2
    piece_of = [sum(1 for s in splits if s <= r) for r in raw_ends]
    assert response.times == [float(i) for i in piece_of]


def test_crlf_lines_a_content_length_body_and_one_ending_with_the_connection():
    crlf = b"data: {\"a\": 1}\r\n\r\ndata: {\"a\": 2}\r\n\r\n"
    for head, ends_with_close in [(b"Content-Length: %d\r\n" % len(crlf), False), (b"", True)]:
        response = http1.Response(events=True)
        raw = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n" + head + b"\r\n" + crlf
        for i in range(len(raw)):  # one byte at a time
            response.parser.feed_data(raw[i:i + 1])
        assert response.datas == [b'{"a": 1}', b'{"a": 2}']
        assert response.complete is not ends_with_close  # that one ends when the server closes
        assert response.until_close is ends_with_close


def test_a_non_stream_answer_is_kept_as_its_bytes_with_the_reason():
    response = http1.Response(events=True)
    response.parser.feed_data(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
    assert response.framer is None and list(response.pieces) == [b"{}"]
    assert "got 'application/json'" in response.problem


def test_a_header_with_a_line_break_is_refused_not_sent():
    with pytest.raises(Exception, match="Illegal header"):
        http1.request_head(b"POST", b"/v1/completions", [(b"Authorization", b"Bearer x\r\nX-Evil: 1")])


# ---------------------------------------------------------------- against the simulator
class KeyedSession(Session):
    """Notes each measured request's prompt (as the simulator's truth keys it)."""

    def request(self, i, *args, **kwargs):
        prompt, asked, output = super().request(i, *args, **kwargs)
        self.keys[i] = prompt_key(prompt)
        return prompt, asked, output


def run_level(url, streams=4, requests=12, use_http1=True, monkeypatch=None, **workload):
    if not use_http1:
        monkeypatch.setattr(http1, "SUPPORTED", False)  # transport.py then uses httpx's transport

    async def go():
        load = Load(concurrency=streams, requests=requests)
        session = KeyedSession(Target(url, "vllm"), Workload(seed=3, **workload), loads=[load])
        session.keys = {}
        try:
            assert (session.http1_transport is not None) is use_http1
            pf = await session.preflight()
            assert pf.ok, pf.cause
            await session.prepare(pf.model)
            outcome = await session.measure(load)
            outcome.keys = session.keys
            return outcome
        finally:
            await session.close()
    return asyncio.run(go())


# How far a chunk's time may fall outside the simulator's write of it: the kernel's receive time
# is converted from the wall clock by reading two clocks one after the other (tens of µs on a
# busy machine). Far below the 1 ms each read is held back below.
CLOCK_TOL_S = 0.0002


def test_the_same_records_as_through_httpx_each_chunk_timed_when_it_arrived(simulator, monkeypatch):
    sim = simulator(decode_ms=8, prefill_ms=20, truth=True)
    receive, reads = http1.Connection._receive, {}

    def held_back(self):
        # Every read held back 1 ms: a chunk timed when its bytes were read would be that late;
        # timed by the kernel's receive time, it is not. Noted: when each response was read.
        time.sleep(0.001)
        if self.response is not None:
            reads.setdefault(self.response.sent, []).append(time.perf_counter())
        return receive(self)

    with monkeypatch.context() as m:
        m.setattr(http1.Connection, "_receive", held_back)
        ours = run_level(sim.url, output_tokens=12, prompt_tokens=40)
    truth = {t["prompt"]: t for t in sim.truth()}
    theirs = run_level(sim.url, use_http1=False, monkeypatch=monkeypatch, output_tokens=12, prompt_tokens=40)

    def shape(outcome):
        return [(r.index, r.ok, r.prompt_tokens, r.output_tokens, r.finish_reason, len(r.chunk_times),
                 r.client_output_tokens, r.status_code) for r in outcome.results]
    assert shape(ours) == shape(theirs)
    assert all(r.ok and len(r.chunk_times) == 12 for r in ours.results)
    # Our chunk times are the kernel's arrival times, on the simulator's clock: each inside the
    # simulator's write() of it (its times just before and just after), or, for chunks one read
    # took together, of the latest (the time such a read gives, as http1 says), and only if no
    # read came between them.
    # A busy machine widens a write and delays reads; it does not move a kernel time out of its
    # write. A few may miss (the reader preempted between its two clocks): up to one in 20,
    # where a time wrong at one place of every stream (its first chunk, say) is one in 12.
    misses, gap_error, chunks = [], [], 0
    for r in ours.results:
        t = truth[ours.keys[r.index]]
        read_at = reads[min(reads, key=lambda sent: abs(sent - (ours.t0 + r.sent)))]
        lo, hi = t["chunks_from"], t["chunks"][:-1] + [t["done"]]  # the last may come with the end
        at = r.chunk_times
        arrived = [ours.t0 + r.sent + a for a in at]
        for k, a in enumerate(arrived):
            chunks += 1
            j = max(i for i in range(k, len(at)) if at[i] == at[k])  # the latest read with it
            read_between = any(t["chunks"][k] + CLOCK_TOL_S < x < lo[j] - CLOCK_TOL_S for x in read_at)
            if read_between or not lo[j] - CLOCK_TOL_S <= a <= hi[j] + CLOCK_TOL_S:
                misses.append((r.index, k, j, round((a - lo[j]) * 1000, 3), round((hi[j] - lo[j]) * 1000, 3),
                               read_between))
            if k and at[k] != at[k - 1]:  # read apart: as far apart as the writes they took
                gap_error.append(abs((a - arrived[k - 1]) - (t["chunks"][j] - t["chunks"][k - 1])))
    assert len(misses) <= chunks // 20, (
        f"{len(misses)} of {chunks} chunks timed outside the simulator's write of them or of a chunk read with "
        f"them (± {CLOCK_TOL_S * 1000} ms): (request, chunk, the latest read with it, ms after its write began, "
        f"the write's ms, whether a read came between them) {misses[:20]}")
    assert gap_error and percentile(gap_error, 50) < CLOCK_TOL_S, (
        f"the gaps between reads differ from the simulator's by {percentile(gap_error, 50) * 1000:.3f} ms (median)")


def test_a_level_of_the_http1_path_reuses_its_connections(simulator):
    sim = simulator(decode_ms=1)
    outcome = run_level(sim.url, streams=4, requests=16, output_tokens=5)
    assert all(r.ok for r in outcome.results)
    assert sim.stats()["connections"] == 4, sim.stats()


def test_an_event_that_never_ends_fails_its_request_past_a_mebibyte(simulator):
    sim = simulator(decode_ms=2, fault="endless", fault_every=2)
    outcome = run_level(sim.url, streams=1, requests=2, output_tokens=10, warmup_requests=0)
    [endless] = [r for r in outcome.results if not r.ok]
    assert endless.error_kind == "protocol" and "grew past 1048576 bytes without ending" in endless.error
    assert len(endless.chunk_times) == 3  # the tokens before it are kept


# ---------------------------------------------------------------- servers that fail
async def scripted_server(script):
    """A server that reads one request and then does `script(writer, reader)`."""

    async def handle(reader, writer):
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            await script(writer, reader)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def send_one(script, timeouts=None):
    async def go():
        server = await scripted_server(script)
        port = server.sockets[0].getsockname()[1]
        session = Session(Target(f"http://127.0.0.1:{port}", "vllm", model="m"), Workload(warmup_requests=0),
                          timeouts)
        try:
            return await session.send(0, "a prompt", 4, time.perf_counter())
        finally:
            await session.close()
            server.close()
    return asyncio.run(go())


def test_a_server_that_dies_mid_stream_fails_the_request_and_keeps_the_chunks_before():
    async def two_then_gone(writer, _):
        writer.write(HEAD + b"".join(b"%x\r\n%s\r\n" % (len(event(k)), event(k)) for k in range(2)))
        writer.write(b"%x\r\ndata: {\"cho" % len(event(3)))  # half a chunk, then nothing
        await writer.drain()
    r = send_one(two_then_gone)
    assert r.error_kind == "protocol" and r.error.startswith("connection lost: RemoteProtocolError")
    assert len(r.chunk_times) == 2


def test_a_reset_mid_stream_is_a_lost_connection_with_the_cause():
    async def one_then_reset(writer, _):
        writer.write(HEAD + b"%x\r\n%s\r\n" % (len(event(0)), event(0)))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.transport.abort()
    r = send_one(one_then_reset)
    assert r.error_kind == "protocol" and r.error.startswith("connection lost:"), r.error
    assert len(r.chunk_times) == 1


def test_an_error_status_keeps_its_body_and_garbage_is_a_protocol_error():
    async def busy(writer, _):
        writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 9\r\n\r\nno slots!")
        await writer.drain()
    r = send_one(busy)
    assert (r.error_kind, r.error, r.status_code) == ("http", "HTTP 503: no slots!", 503)

    async def garbage(writer, _):
        writer.write(b"SPDY/9 nonsense\r\n\r\n")
        await writer.drain()
    r = send_one(garbage)
    assert r.error_kind == "protocol" and "malformed HTTP response" in r.error


def test_silence_after_the_headers_times_out():
    async def headers_then_silence(writer, _):
        writer.write(HEAD)
        await writer.drain()
        await asyncio.sleep(5)
    started = time.monotonic()
    r = send_one(headers_then_silence, Timeouts(connect=2, first_byte=0.3, total=10))
    assert r.error == "timeout: ReadTimeout: timed out" and time.monotonic() - started < 3


def test_the_http1_transport_is_used_for_plain_http_only():
    limits = httpx.Limits(max_connections=2)
    policy = AddressPolicy()
    assert isinstance(transport.endpoint_transport("http://127.0.0.1:9", limits, policy), http1.Transport)
    assert not isinstance(transport.endpoint_transport("https://127.0.0.1:9", limits, policy), http1.Transport)


def test_a_cancelled_request_closes_its_connection():
    closed = []

    async def stream_then_wait(writer, reader):
        writer.write(HEAD + b"%x\r\n%s\r\n" % (len(event(0)), event(0)))
        await writer.drain()
        closed.append(await reader.read())  # b"" once the client has closed its end

    async def go():
        server = await scripted_server(stream_then_wait)
        port = server.sockets[0].getsockname()[1]
        session = Session(Target(f"http://127.0.0.1:{port}", "vllm", model="m"), Workload(warmup_requests=0))
        try:
            task = asyncio.ensure_future(session.send(0, "a prompt", 4, time.perf_counter()))
            await asyncio.sleep(0.3)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            deadline = time.monotonic() + 5
            while not closed and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            return closed, [p.open for p in session.http1_transport.pools.values()]
        finally:
            await session.close()
            server.close()
    closed, pools = asyncio.run(go())
    assert closed == [b""] and pools == [set()]  # seen closed by the server before the session closed
