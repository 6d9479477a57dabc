"""The lean httpx transport: framing edge cases against a real server writing exact bytes, the kernel's
arrival stamps (parsing as pure functions, and on loopback while the event loop is blocked), the fallback."""

import asyncio
import socket
import struct
import threading
import time

import httpx
import pytest
from lanebook.speed import transport
from lanebook.speed.client import new_client, run
from lanebook.speed.records import STAMP_KERNEL, STAMP_LOOP
from lanebook.speed.transport import (
    CLOCK_READ_GAP_NS,
    SO_TIMESTAMPNS_NEW,
    ChunkedDecoder,
    perf_seconds,
    realtime_minus_perf_ns,
    receive_stamp_ns,
)

CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    b"7\r\ndata: a\r\n5;ext=1\r\n\n\nxyz\r\n10\r\n0123456789abcdef\r\n0\r\nx-trailer: 1\r\n\r\n"
)
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
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                await reader.readexactly(length)
                response = queue.pop(0)
                if response is None:  # never answer
                    await reader.read()
                    break
                steps = [response] if not piece else [response[i : i + piece] for i in range(0, len(response), piece)]
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


# Arrival stamps -------------------------------------------------------------------------------------------


def test_ancillary_data_gives_the_kernel_receive_time_in_nanoseconds():
    stamp = struct.pack("=qq", 1_796_109_003, 107_325_463)  # struct __kernel_timespec {seconds, nanoseconds}
    other = (socket.IPPROTO_IP, 8, b"\x00" * 16)  # someone else's control message comes first
    assert receive_stamp_ns([other, (socket.SOL_SOCKET, SO_TIMESTAMPNS_NEW, stamp)]) == 1_796_109_003_107_325_463
    assert receive_stamp_ns([]) is None  # a read the kernel did not stamp
    assert receive_stamp_ns([(socket.SOL_SOCKET, 35, stamp)]) is None  # the old option's message is not ours
    assert receive_stamp_ns([(socket.SOL_SOCKET, SO_TIMESTAMPNS_NEW, stamp[:8])]) is None  # truncated


def test_wall_clock_stamps_move_onto_perf_counter_with_nanoseconds_kept():
    offset = 1_796_109_000_000_000_000  # CLOCK_REALTIME - perf_counter, in ns
    assert perf_seconds(1_796_109_003_000_000_001, offset) == 3.000000001
    assert perf_seconds(1_796_109_003_107_325_463, offset) == 3.107325463
    # as floats first, the two stamps 1 ns apart would be the same number
    assert float(1_796_109_003_000_000_001) == float(1_796_109_003_000_000_000)


def test_clock_offset_is_read_again_when_a_preemption_splits_the_readings():
    perf = iter([1_000, 1_000 + CLOCK_READ_GAP_NS + 1, 90_000, 90_400]).__next__
    wall = iter([5_000_000_000, 5_000_089_100]).__next__
    # first try: the perf readings are too far apart; second: wall 5_000_089_100 against perf midpoint 90_200
    assert realtime_minus_perf_ns(perf, wall) == 5_000_089_100 - 90_200


def test_chunked_frames_are_released_in_the_read_that_brought_them():
    decoder = ChunkedDecoder()
    reads = [b"5\r\nhel", b"lo", b"\r", b"\n3;x=1\r", b"\nabc\r\n", b"2\r\nde\r\n0\r\n", b"x-t: 1\r\n", b"\r\n"]
    assert [decoder.feed(r) for r in reads] == [b"hel", b"lo", b"", b"", b"abc", b"de", b"", b""]
    assert decoder.done
    whole = ChunkedDecoder()
    assert whole.feed(b"4\r\nwxyz\r\n1\r\n!\r\n0\r\n\r\n") == b"wxyz!" and whole.done
    with pytest.raises(httpx.RemoteProtocolError, match="bad chunk size line"):
        ChunkedDecoder().feed(b"zz\r\n")


class ThreadServer:
    """A blocking server in a thread, so it writes while the client's event loop is blocked."""

    def __init__(self, script):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, args=(script,), daemon=True)
        self.thread.start()

    def _serve(self, script):
        conn, _ = self.listener.accept()
        with conn, self.listener:
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(4096)
            script(conn)


def frame(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def blocked_loop_read():
    """The server sends a second frame while the client's event loop is blocked (a synchronous wait,
    then a sleep); returns the server's perf_counter just before that write, the stamp of the read that
    brought the frame, when the loop was unblocked, and the transport's stamp source."""
    go, sent, finish = threading.Event(), threading.Event(), threading.Event()
    written = {}

    def script(conn):
        conn.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + frame(b"data: 1\n\n"))
        go.wait(10)
        written["t"] = time.perf_counter()
        time.sleep(0.002)
        conn.sendall(frame(b"data: 2\n\n"))
        sent.set()
        finish.wait(10)
        conn.sendall(b"0\r\n\r\n")

    server = ThreadServer(script)

    async def go_read():
        async with new_client() as client:
            async with client.stream("GET", server.url + "/x") as response:
                body = response.extensions["stamped_body"]
                reads = body.stamped()
                assert (await anext(reads))[0] == b"data: 1\n\n"
                go.set()
                sent.wait(10)  # blocks the event loop until the frame is on its way...
                time.sleep(0.2)  # ...and well after it arrived
                unblocked = time.perf_counter()
                payload, t = await anext(reads)
                finish.set()
                assert payload == b"data: 2\n\n" and [p async for p, _ in reads] == [b""]
                return written["t"], t, unblocked, body.source

    return run(go_read())


def test_kernel_stamp_is_the_arrival_not_when_the_blocked_loop_read_it():
    written, stamp, unblocked, source = blocked_loop_read()
    assert source == STAMP_KERNEL
    assert written <= stamp < unblocked


def test_without_the_socket_option_reads_are_stamped_by_this_process_and_say_so(monkeypatch):
    monkeypatch.setattr(transport, "SO_TIMESTAMPNS_NEW", 0x7FFE)  # an option this kernel refuses
    held, why = transport.stamped_socket()
    assert held is None and why.startswith("kernel receive timestamps unavailable: SO_TIMESTAMPNS: [Errno")
    lean = transport.LeanTransport()
    assert lean.stamp_source == STAMP_LOOP and lean.stamp_note == why
    written, stamp, unblocked, source = blocked_loop_read()
    assert source == STAMP_LOOP
    assert unblocked <= stamp  # what kernel stamps avoid: the read is timed when the loop got to it


def busy_loop_reads(catch_up: bool):
    """The server writes two frames 30 ms apart while the client's event loop is blocked throughout (as when it sets
    up other streams); midway, with catch_up, the blocked code calls the transport's catch_up (as each stream's
    set-up does). Returns the two frames' stamps and the server's perf_counter around each write."""
    go, first, caught, second = (threading.Event() for _ in range(4))
    written = []

    def script(conn):
        conn.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + frame(b"data: 0\n\n"))
        for payload, wait, done in ((b"data: 1\n\n", go, first), (b"data: 2\n\n", caught, second)):
            wait.wait(10)
            before = time.perf_counter()
            conn.sendall(frame(payload))
            written.append((before, time.perf_counter()))
            done.set()
        conn.sendall(b"0\r\n\r\n")

    server = ThreadServer(script)
    lean = transport.LeanTransport()

    async def read_all():
        async with new_client(lean) as client:
            async with client.stream("GET", server.url + "/x") as response:
                reads = response.extensions["stamped_body"].stamped()
                assert (await anext(reads))[0] == b"data: 0\n\n"
                go.set()
                first.wait(10)  # the event loop blocked from here on
                time.sleep(0.03)
                if catch_up:
                    lean.catch_up()
                caught.set()
                second.wait(10)
                time.sleep(0.01)
                return [(p, t) async for p, t in reads if p]

    return run(read_all()), written


def test_catch_up_keeps_a_busy_loops_segments_apart():
    """Without it both frames are read after the loop frees, bearing one stamp: the second's arrival."""
    caught, written = busy_loop_reads(catch_up=True)
    assert [p for p, _ in caught] == [b"data: 1\n\n", b"data: 2\n\n"]
    (_, t1), (_, t2) = caught
    assert written[0][0] <= t1 < written[1][0] <= t2
    merged, written = busy_loop_reads(catch_up=False)
    assert b"".join(p for p, _ in merged) == b"data: 1\n\ndata: 2\n\n"
    assert len({t for _, t in merged}) == 1 and merged[0][1] >= written[1][0]
