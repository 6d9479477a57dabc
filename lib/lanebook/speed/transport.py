"""A lean HTTP/1.1 transport for httpx that stamps every socket read with the time its bytes arrived.

It reads the socket directly and hands httpx one block per read, chunked framing removed; httpx's API, exceptions
and keep-alive pooling stay (a response read to its end returns its connection, an abandoned one closes it).
https:// URLs go to httpx's standard transport, unstamped. Stamps come from the kernel (SO_TIMESTAMPNS), moved onto
perf_counter's clock per read, so stamps, TTFT and wall time share one clock; where the kernel cannot stamp, each
read is stamped when made, and `stamp_source`/`stamp_note` say which (one source per transport, never mixed).
A read's stamp is the newest segment's behind its bytes, and Linux gives segments that queued up unread one stamp,
the newest's: reads of one merged segment carry the same stamp and time (metrics.py tells such chunks apart).
`response.extensions["stamped_body"]` yields each read's payload with its stamp. Body reads carry no per-read
timeout: callers bound whole requests. Why: docs/decisions.md, the "Speed client" entries.
"""

from __future__ import annotations

import asyncio
import select
import socket
import struct
import sys
import time
from collections import deque
from typing import AsyncIterator, Callable, Iterable, Optional

import httpx

from lanebook.nodes.http import tls_context
from lanebook.speed.records import STAMP_KERNEL, STAMP_LOOP

READ_BYTES = 1 << 16
BUFFERED_LIMIT = 4 * READ_BYTES  # stop reading a connection past this much unconsumed data (see _on_readable)
HEAD_LIMIT = 1 << 16  # a response head longer than this is refused
SO_TIMESTAMPNS_NEW = 64  # Linux's asm-generic value; its payload is the same 2 x int64 on 32- and 64-bit
TIMESPEC = struct.Struct("=qq")  # struct __kernel_timespec: seconds, nanoseconds
ANCILLARY_BYTES = socket.CMSG_SPACE(TIMESPEC.size)
PROBE_TIMEOUT_S = 1.0
SOL_SOCKET = socket.SOL_SOCKET
CLOCK_READ_GAP_NS = 5_000  # two perf readings further apart than this bracket a preemption: read again
EDGE_READS = 4  # a body's first reads (its head's rest, the first content chunks) catch up on every connection
Key = tuple[str, int]


def receive_stamp_ns(ancdata: Iterable[tuple[int, int, bytes]]) -> Optional[int]:
    """The kernel's receive time (CLOCK_REALTIME nanoseconds) from recvmsg's ancillary data, None without one."""
    for level, kind, data in ancdata:
        if level == SOL_SOCKET and kind == SO_TIMESTAMPNS_NEW and len(data) >= TIMESPEC.size:
            seconds, nanoseconds = TIMESPEC.unpack_from(data)
            return seconds * 1_000_000_000 + nanoseconds
    return None


def perf_seconds(realtime_ns: int, realtime_minus_perf_ns: int) -> float:
    """A CLOCK_REALTIME time on perf_counter's clock, in seconds. The subtraction is done in integer
    nanoseconds first: a float holding wall-clock nanoseconds (about 1.8e18) keeps only 256 ns steps."""
    return (realtime_ns - realtime_minus_perf_ns) / 1e9


def realtime_minus_perf_ns(
    perf: Callable[[], int] = time.perf_counter_ns, wall: Callable[[], int] = time.time_ns
) -> int:
    """CLOCK_REALTIME minus perf_counter's clock, now: the wall reading taken between two perf readings
    and set against their midpoint, taken again while those two are far apart (a preemption between
    the readings would otherwise shift the offset, and so the stamp, by its whole length)."""
    while True:
        before, now, after = perf(), wall(), perf()
        if after - before < CLOCK_READ_GAP_NS:
            return now - (before + after) // 2


def stamped_socket() -> tuple[Optional[socket.socket], Optional[str]]:
    """A loopback socket with SO_TIMESTAMPNS on, once the kernel has stamped data on it; else None and why.

    Linux stamps received packets only while some socket asks for it, and the first socket to ask
    turns stamping on later, from a work queue: TCP data that arrives in between carries no stamp.
    Receiving a stamped byte here proves stamping is on before the first request; keeping this
    socket open keeps it on (Linux turns it off, again later, when the last socket asking closes).
    """
    if not sys.platform.startswith("linux"):
        return None, f"kernel receive timestamps (SO_TIMESTAMPNS) are Linux's; this is {sys.platform}"
    listener = receiver = None
    try:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.settimeout(PROBE_TIMEOUT_S)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        receiver = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        receiver.settimeout(PROBE_TIMEOUT_S)
        receiver.setsockopt(SOL_SOCKET, SO_TIMESTAMPNS_NEW, 1)
        receiver.connect(listener.getsockname())
        sender, _ = listener.accept()
        with sender:
            deadline = time.monotonic() + PROBE_TIMEOUT_S
            while True:
                sender.sendall(b".")
                _, ancdata, _, _ = receiver.recvmsg(16, ANCILLARY_BYTES)
                if receive_stamp_ns(ancdata) is not None:
                    held, receiver = receiver, None
                    return held, None
                if time.monotonic() > deadline:
                    return None, f"the kernel stamped no data on a loopback socket within {PROBE_TIMEOUT_S:g} s"
                time.sleep(0.001)
    except OSError as exc:
        return None, f"kernel receive timestamps unavailable: SO_TIMESTAMPNS: {exc}"
    finally:
        for sock in (listener, receiver):
            if sock is not None:
                sock.close()


class ChunkedDecoder:
    """HTTP/1.1 chunked transfer coding, fed socket reads: each feed returns the payload bytes that read
    completed, so a frame's bytes are released in the read that brought them (not held back for the
    frame's closing CRLF or the next frame's size line)."""

    def __init__(self) -> None:
        self.pending = b""  # an incomplete size or trailer line
        self.due = 0  # bytes of a frame begun in an earlier read still to come: payload, then its CRLF
        self.trailers = False  # past the last (zero-size) frame: trailer lines until an empty one
        self.done = False

    def feed(self, data: bytes) -> bytes:
        if self.pending:
            data, self.pending = self.pending + data, b""
        end, out = len(data), []
        pos = 0
        if self.due:
            pos = min(self.due, end)
            if self.due > 2:
                out.append(data[: min(pos, self.due - 2)])
            self.due -= pos
        while pos < end:
            eol = data.find(b"\r\n", pos)
            if eol < 0:
                if end - pos > HEAD_LIMIT:
                    raise httpx.RemoteProtocolError("chunked framing line too long")
                self.pending = data[pos:]
                break
            start = eol + 2
            if self.trailers:
                if eol == pos:
                    self.done = True
                    break
                pos = start
                continue
            try:
                size = int(data[pos:eol], 16)
            except ValueError:  # a chunk extension (";name=value"), or garbage
                size = _chunk_size(data[pos:eol])
            if not size:
                self.trailers = True
                pos = start
                continue
            stop = start + size
            if stop + 2 <= end:  # the whole frame is here (the common case)
                out.append(data[start:stop])
                pos = stop + 2
            else:
                if start < end:
                    out.append(data[start : min(stop, end)])
                self.due = stop + 2 - end
                break
        return b"".join(out)


def _chunk_size(line: bytes) -> int:
    try:
        return int(line.split(b";", 1)[0], 16)
    except ValueError:
        raise httpx.RemoteProtocolError(f"bad chunk size line {line[:40]!r}") from None


class _Connection:
    """One HTTP/1.1 connection on a non-blocking socket. While a response is awaited the event loop
    calls _on_readable, which reads at once and queues each read with its arrival stamp."""

    def __init__(
        self,
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
        kernel_stamps: bool,
        on_close: Callable[["_Connection"], None] = lambda conn: None,
    ):
        self.sock, self.loop, self.fd, self.kernel_stamps = sock, loop, sock.fileno(), kernel_stamps
        self.on_close = on_close
        self.reads: deque[tuple[bytes, Optional[float]]] = deque()
        self.buffered = 0
        self.eof = False
        self.failure: Optional[OSError] = None
        self.watching = False
        self.waiter: Optional[asyncio.Future] = None
        self.closed = False
        # The last kernel stamp and its perf_counter time: reads of one merged segment carry one stamp, and
        # keep one time (the offset, sampled per read, would otherwise set them apart by its jitter).
        self.last_stamp: Optional[int] = None
        self.last_t: Optional[float] = None

    def _watch(self) -> None:
        if not self.watching:
            self.loop.add_reader(self.fd, self._on_readable)
            self.watching = True

    def unwatch(self) -> None:
        if self.watching:
            self.loop.remove_reader(self.fd)
            self.watching = False

    def _on_readable(self) -> None:
        try:
            if self.kernel_stamps:
                data, ancdata, _, _ = self.sock.recvmsg(READ_BYTES, ANCILLARY_BYTES)
                stamp = receive_stamp_ns(ancdata)
                if stamp is None:
                    t = None
                elif stamp == self.last_stamp:
                    t = self.last_t
                else:
                    t = self.last_t = perf_seconds(stamp, realtime_minus_perf_ns())
                    self.last_stamp = stamp
            else:
                data, t = self.sock.recv(READ_BYTES), time.perf_counter()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.failure = exc
            self.unwatch()
        else:
            if data:
                self.reads.append((data, t))
                self.buffered += len(data)
                if self.buffered >= BUFFERED_LIMIT:
                    # A consumer this far behind: leave further data in the kernel, which keeps its
                    # arrival stamps; read() watches again once the queue is empty.
                    self.unwatch()
            else:
                self.eof = True
                self.unwatch()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def read(self) -> tuple[bytes, Optional[float]]:
        """The next read's bytes and arrival stamp; b"" once the peer has closed."""
        while not self.reads:
            if self.failure is not None:
                raise httpx.ReadError(str(self.failure) or type(self.failure).__name__)
            if self.eof:
                return b"", None
            if self.closed:
                raise httpx.ReadError("connection closed")
            self._watch()
            self.waiter = self.loop.create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        data, t = self.reads.popleft()
        self.buffered -= len(data)
        return data, t

    async def send(self, data: bytes) -> None:
        try:
            await self.loop.sock_sendall(self.sock, data)
        except OSError as exc:
            raise httpx.WriteError(str(exc) or type(exc).__name__) from None

    @property
    def usable(self) -> bool:
        """Idle and still open: nothing queued, and the peer has neither closed nor sent anything."""
        if self.closed or self.eof or self.failure is not None or self.reads:
            return False
        try:
            self.sock.recv(1, socket.MSG_PEEK)  # returns at once: b"" (closed) or unexpected bytes
        except (BlockingIOError, InterruptedError):
            return True  # nothing to read: open and quiet
        except OSError:
            pass
        return False

    def close(self) -> None:
        if not self.closed:
            self.unwatch()
            self.on_close(self)
            self.sock.close()
            self.closed = True


class StampedBody(httpx.AsyncByteStream):
    """A response body, chunked, content-length or read-to-close, one socket read at a time.

    stamped() yields each read's payload bytes with the read's arrival stamp (perf_counter seconds;
    None after a read the kernel left unstamped on a kernel-stamped socket), including a last read
    that brought only framing, so the final stamp is the arrival of the body's end. Iterating the
    body as httpx does yields the same payloads without stamps. `source` says what stamped them.
    """

    def __init__(
        self,
        transport: "LeanTransport",
        key: Key,
        conn: _Connection,
        chunked: bool,
        length: Optional[int],
        keep_alive: bool,
        first: tuple[bytes, Optional[float]],
    ):
        self.transport, self.key, self.conn = transport, key, conn
        self.chunked, self.length, self.keep_alive = chunked, length, keep_alive
        self.first = first  # the body's bytes that came in the head's read, and that read's stamp
        self.source = transport.stamp_source
        self.complete = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for payload, _ in self.stamped():
            if payload:
                yield payload

    async def stamped(self) -> AsyncIterator[tuple[bytes, Optional[float]]]:
        decoder = ChunkedDecoder() if self.chunked else None
        remaining = self.length  # None: chunked, or read to close
        data, t = self.first
        edge_reads = EDGE_READS
        while remaining != 0:
            if data:
                if decoder is not None:
                    yield decoder.feed(data), t
                    if decoder.done:
                        break
                elif remaining is not None:
                    yield data[:remaining], t
                    remaining = max(0, remaining - len(data))
                    if not remaining:
                        break
                else:
                    yield data, t
            if edge_reads:
                edge_reads -= 1
                self.transport.catch_up()
            data, t = await self.conn.read()
            if not data:
                if decoder is not None or remaining is not None:
                    raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")
                self.keep_alive = False  # a read-to-close body ends the connection with it
                break
        self.complete = True

    async def aclose(self) -> None:
        self.conn.unwatch()
        if self.complete and self.keep_alive and self.conn.usable:
            self.transport.idle.setdefault(self.key, []).append(self.conn)
        else:
            self.conn.close()


class LeanTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 keep-alive over non-blocking sockets for http://, every read stamped with its arrival;
    https:// is delegated to httpx."""

    def __init__(self) -> None:
        self.idle: dict[Key, list[_Connection]] = {}
        self.tls = httpx.AsyncHTTPTransport(verify=tls_context())
        self._stamping, self.stamp_note = stamped_socket()
        self.stamp_source = STAMP_KERNEL if self._stamping else STAMP_LOOP
        self._poller = select.epoll() if hasattr(select, "epoll") else None  # this transport's sockets, for catch_up
        self._open: dict[int, _Connection] = {}

    def _opened(self, conn: _Connection) -> _Connection:
        if self._poller is not None:
            self._poller.register(conn.fd, select.EPOLLIN)
            self._open[conn.fd] = conn
        return conn

    def _closed(self, conn: _Connection) -> None:
        if self._open.pop(conn.fd, None) is not None:
            self._poller.unregister(conn.fd)

    def catch_up(self) -> None:
        """Read now every awaited connection the kernel holds data for, while the event loop is busy with one.

        Segments left unread take one stamp, the newest's (Linux merges them in the receive queue, or one read takes
        them all): a stream whose first chunk waits there while the loop sets up 63 others is stamped with its next
        chunk's arrival. Called as requests go out and in a body's first reads, this keeps every stream's early
        segments read one at a time, at the cost of an epoll_wait per call (Linux; elsewhere it does nothing).
        """
        if self._poller is None:
            return
        for fd, _ in self._poller.poll(0):
            conn = self._open.get(fd)
            if conn is not None and conn.watching:
                conn._on_readable()

    async def _connection(self, key: Key, timeout_s: Optional[float]) -> _Connection:
        pool = self.idle.get(key, [])
        while pool:
            conn = pool.pop()
            if conn.usable:
                return conn
            conn.close()
        loop = asyncio.get_running_loop()
        kernel = self.stamp_source == STAMP_KERNEL
        failure: Optional[BaseException] = None
        try:
            async with asyncio.timeout(timeout_s):
                for family, kind, proto, _, address in await loop.getaddrinfo(*key, type=socket.SOCK_STREAM):
                    sock = socket.socket(family, kind, proto)
                    try:
                        sock.setblocking(False)
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        if kernel:
                            sock.setsockopt(SOL_SOCKET, SO_TIMESTAMPNS_NEW, 1)
                        await loop.sock_connect(sock, address)
                    except OSError as exc:
                        sock.close()
                        failure = exc
                        continue
                    except BaseException:
                        sock.close()
                        raise
                    return self._opened(_Connection(sock, loop, kernel, self._closed))
        except (OSError, TimeoutError) as exc:
            failure = exc
        raise httpx.ConnectError(str(failure) or type(failure).__name__) from None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "http":
            return await self.tls.handle_async_request(request)
        timeouts = request.extensions.get("timeout", {})
        key = (request.url.host, request.url.port or 80)
        conn = await self._connection(key, timeouts.get("connect"))
        body = await request.aread()
        head = [f"{request.method} {request.url.raw_path.decode('ascii')} HTTP/1.1".encode()]
        head += [b"%s: %s" % (k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
        head.append(b"content-length: %d" % len(body))
        trace = request.extensions.get("trace")
        buf, t = b"", None
        try:
            if trace:
                await trace("http11.send_request_headers.started", {"request": request})
            async with asyncio.timeout(timeouts.get("read")):
                self.catch_up()  # C requests go out in one turn of the loop: read what came back meanwhile
                await conn.send(b"\r\n".join(head) + b"\r\n\r\n" + body)
                while (end := buf.find(b"\r\n\r\n")) < 0:
                    data, t = await conn.read()
                    self.catch_up()
                    if not data:
                        raise httpx.RemoteProtocolError("server disconnected without sending a response")
                    buf += data
                    if len(buf) > HEAD_LIMIT:
                        raise httpx.RemoteProtocolError(f"response head longer than {HEAD_LIMIT} bytes")
        except TimeoutError:
            conn.close()
            raise httpx.ReadTimeout("no response head within the read timeout") from None
        except BaseException:
            conn.close()
            raise
        status_line, *lines = buf[:end].split(b"\r\n")
        version, status = status_line.split(b" ", 2)[:2]
        headers = [(k.strip(), v.strip()) for k, _, v in (line.partition(b":") for line in lines)]
        fields = {k.lower(): v.lower() for k, v in headers}
        chunked = b"chunked" in fields.get(b"transfer-encoding", b"")
        length = 0 if request.method == "HEAD" or status in (b"204", b"304") else None
        if not chunked and b"content-length" in fields:
            length = int(fields[b"content-length"])
        keep_alive = version == b"HTTP/1.1" and fields.get(b"connection") != b"close"
        stream = StampedBody(self, key, conn, chunked, length, keep_alive, (buf[end + 4 :], t))
        return httpx.Response(
            int(status),
            headers=headers,
            stream=stream,
            request=request,
            extensions={"http_version": version, "stamped_body": stream},
        )

    async def aclose(self) -> None:
        for pool in self.idle.values():
            for conn in pool:
                conn.close()
        self.idle.clear()
        if self._poller is not None:
            self._poller.close()
            self._poller = None
            self._open.clear()
        if self._stamping is not None:
            self._stamping.close()
            self._stamping = None
        await self.tls.aclose()
