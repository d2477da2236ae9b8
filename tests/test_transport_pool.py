"""The client's connection pool (engine/transport.py `_Pool`) never hands out a keep-alive
connection the server has closed: a server that closes its connections after answering, without
saying so (as llama-server was seen doing in rate mode), must not fail the next requests.
Before, the pool dropped closed connections only on its sweep (every 0.5 s): a request in that
window got a closed one and failed with "server disconnected without sending a response", and
its one retry got a sibling closed at the same moment."""
import asyncio

import httpx

from benchmarks.engine.addresses import AddressPolicy
from benchmarks.engine.transport import endpoint_transport

BODY = b"ok"


async def _closing_server(closed: list):
    """An HTTP/1.1 server answering one request per connection with 200 "ok" and keep-alive
    headers, then closing the connection."""
    async def handle(reader, writer):
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nKeep-Alive: timeout=5, max=100\r\n\r\n" + BODY)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            closed.append(1)
    return await asyncio.start_server(handle, "127.0.0.1", 0)


def test_connections_the_server_closed_are_not_given_to_the_next_requests():
    async def go():
        closed: list = []
        server = await _closing_server(closed)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
        limits = httpx.Limits(max_connections=8, max_keepalive_connections=8)
        client = httpx.AsyncClient(transport=endpoint_transport(url, limits, AddressPolicy()))
        try:
            # Two connections, both back in the pool as idle, both then closed by the server.
            first = await asyncio.gather(client.get(url), client.get(url))
            while len(closed) < 2:
                await asyncio.sleep(0.005)
            await asyncio.sleep(0.02)  # the client's reader has seen both ends of file
            # Well inside the pool's 0.5 s sweep: each request must get a live connection.
            later = []
            for _ in range(3):
                later.append(await client.get(url))
                await asyncio.sleep(0.02)  # the server has closed this one too, and the client seen it
            return first + later
        finally:
            await client.aclose()
            server.close()
            await server.wait_closed()

    responses = asyncio.run(go())
    assert [r.status_code for r in responses] == [200] * 5
    assert all(r.content == BODY for r in responses)
