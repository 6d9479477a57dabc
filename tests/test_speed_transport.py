"""The lean httpx transport against a real asyncio server that writes exact bytes (framing edge cases)."""
import asyncio

import httpx
import pytest

from lanebook.speed.client import new_client, run

CHUNKED = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
           b"7\r\ndata: a\r\n5;ext=1\r\n\n\nxyz\r\n10\r\n0123456789abcdef\r\n0\r\nx-trailer: 1\r\n\r\n")
CHUNKED_BODY = b"data: a\n\nxyz0123456789abcdef"


async def scripted(responses, piece=0, delay=0.0):
    """Serve each accepted request with the next scripted response, `piece` bytes at a time."""
    state = {"connections": 0, "closed": 0}
    queue = list(responses)

    async def handle(reader, writer):
        state["connections"] += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length")), 0)
                await reader.readexactly(length)
                response = queue.pop(0)
                if response is None:  # never answer
                    await reader.read()
                    break
                steps = [response] if not piece else [response[i:i + piece] for i in range(0, len(response), piece)]
                for part in steps:
                    writer.write(part)
                    await writer.drain()
                    if delay:
                        await asyncio.sleep(delay)
                if b"connection: close" in response.lower():
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        state["closed"] += 1
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", state


def test_chunked_framing_survives_any_fragmentation():
    async def go(piece):
        server, url, _ = await scripted([CHUNKED], piece=piece, delay=0.0005 if piece else 0.0)
        async with server, new_client() as client:
            async with client.stream("POST", url + "/x", content=b"{}") as response:
                blocks = [b async for b in response.aiter_bytes()]
            return response, b"".join(blocks)

    for piece in (0, 1, 3):
        response, body = run(go(piece))
        assert response.status_code == 200 and body == CHUNKED_BODY, piece
        assert response.headers["content-type"] == "text/event-stream"


def test_content_length_close_delimited_and_keep_alive():
    fixed = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"
    closing = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\n\r\nbye for now"

    async def go():
        server, url, state = await scripted([fixed, fixed, closing, fixed])
        async with server, new_client() as client:
            first = await client.get(url + "/a")
            second = await client.get(url + "/b")
            assert state["connections"] == 1  # the second request reused the kept-alive connection
            third = await client.get(url + "/c")
            fourth = await client.get(url + "/d")
            return [first.content, second.content, third.status_code, third.content, fourth.content], state

    bodies, state = run(go())
    assert bodies == [b"hello", b"hello", 503, b"bye for now", b"hello"]
    assert state["connections"] == 2  # "connection: close" forced a new one


def test_abandoned_stream_closes_its_connection():
    async def go():
        server, url, state = await scripted([CHUNKED, CHUNKED], piece=8, delay=0.01)
        async with server, new_client() as client:
            async with client.stream("POST", url + "/x", content=b"{}") as response:
                async for _ in response.aiter_bytes():
                    break
            async with client.stream("POST", url + "/x", content=b"{}") as response:
                body = b"".join([b async for b in response.aiter_bytes()])
            return body, state

    body, state = run(go())
    assert body == CHUNKED_BODY and state["connections"] == 2


def test_no_response_head_is_a_read_timeout():
    async def go():
        server, url, _ = await scripted([None])
        async with server, new_client() as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.get(url + "/x", timeout=httpx.Timeout(0.3))

    run(go())


def test_truncated_chunked_body_is_a_protocol_error():
    """The server drops the connection in the middle of a chunk (its "connection: close" makes it hang up)."""
    cut = CHUNKED.replace(b"transfer-encoding", b"connection: close\r\ntransfer-encoding")
    cut = cut[: cut.index(b"0123")] + b"0123"

    async def go():
        server, url, _ = await scripted([cut])
        async with server, new_client() as client:
            async with client.stream("POST", url + "/x", content=b"{}") as response:
                with pytest.raises(httpx.RemoteProtocolError, match="without sending complete message body"):
                    async for _ in response.aiter_bytes():
                        pass

    run(go())
