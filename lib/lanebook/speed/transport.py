"""A lean HTTP/1.1 transport for httpx, for the harness's own requests to a lane's plain-http API.

httpx's default stack (httpcore, h11, anyio) spends about 70 µs of Python per SSE chunk: several
async-generator layers, a timeout scope per socket read, an h11 event per frame. At 64 streams that
is the client's whole CPU budget, and a busy client reads its clock late. This transport reads the
socket directly (asyncio streams) and hands httpx one block per socket read with the chunked framing
removed, so a read that brought five chunks costs one pass. httpx's API, exceptions and keep-alive
pooling stay: errors map to httpx exceptions; a response read to its end returns its connection to
the pool, an abandoned one closes it. https:// URLs go to httpx's standard transport.

Timeouts: connecting and the response head obey httpx's connect/read timeouts; body reads carry no
per-read timer (that timer is the cost avoided), so callers bound whole requests (the harness does).
"""
from __future__ import annotations

import asyncio
from typing import AsyncIterator, Optional

import httpx

READ_BYTES = 1 << 16
Key = tuple[str, int]


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    @property
    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        self.writer.close()


class _Body(httpx.AsyncByteStream):
    """A response body, chunked, content-length or read-to-close: one block per socket read."""

    def __init__(self, transport: "LeanTransport", key: Key, conn: _Connection, chunked: bool,
                 length: Optional[int], keep_alive: bool):
        self.transport, self.key, self.conn = transport, key, conn
        self.chunked, self.length, self.keep_alive = chunked, length, keep_alive
        self.complete = False

    async def _read(self, eof_ok: bool = False) -> bytes:
        try:
            data = await self.conn.reader.read(READ_BYTES)
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__) from None
        if not data and not eof_ok:
            raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")
        return data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.chunked:
            async for block in self._chunks():
                yield block
        elif self.length is not None:
            remaining = self.length
            while remaining > 0:
                block = await self._read()
                yield block[:remaining]
                remaining -= len(block)
        else:
            while block := await self._read(eof_ok=True):
                yield block
            self.keep_alive = False
        self.complete = True

    async def _chunks(self) -> AsyncIterator[bytes]:
        buf = b""
        while True:
            buf += await self._read()
            pos, out = 0, []
            while (eol := buf.find(b"\r\n", pos)) >= 0:  # every whole frame the buffer holds
                try:
                    size = int(buf[pos:eol].split(b";", 1)[0], 16)
                except ValueError:
                    raise httpx.RemoteProtocolError(f"bad chunk size line {buf[pos:eol][:40]!r}") from None
                if size == 0:  # the last chunk; trailers, if any, end with an empty line
                    if buf.find(b"\r\n\r\n", eol) < 0:
                        break
                    if out:
                        yield b"".join(out)
                    return
                if len(buf) < eol + 4 + size:
                    break
                out.append(buf[eol + 2:eol + 2 + size])
                pos = eol + 4 + size
            buf = buf[pos:]
            if out:
                yield b"".join(out)

    async def aclose(self) -> None:
        if self.complete and self.keep_alive and self.conn.usable:
            self.transport.idle.setdefault(self.key, []).append(self.conn)
        else:
            self.conn.close()


class LeanTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 keep-alive over asyncio streams for http://; https:// is delegated to httpx."""

    def __init__(self) -> None:
        self.idle: dict[Key, list[_Connection]] = {}
        self.tls = httpx.AsyncHTTPTransport()

    async def _connection(self, key: Key, timeout_s: Optional[float]) -> _Connection:
        pool = self.idle.get(key, [])
        while pool:
            conn = pool.pop()
            if conn.usable:
                return conn
            conn.close()
        try:
            async with asyncio.timeout(timeout_s):
                return _Connection(*await asyncio.open_connection(*key))
        except (OSError, TimeoutError) as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from None

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
        try:
            if trace:
                await trace("http11.send_request_headers.started", {"request": request})
            conn.writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
            async with asyncio.timeout(timeouts.get("read")):
                await conn.writer.drain()
                raw = await conn.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            conn.close()
            raise httpx.RemoteProtocolError("server disconnected without sending a response") from None
        except TimeoutError:
            conn.close()
            raise httpx.ReadTimeout("no response head within the read timeout") from None
        except (OSError, asyncio.LimitOverrunError) as exc:
            conn.close()
            raise httpx.ReadError(str(exc) or type(exc).__name__) from None
        status_line, *lines = raw[:-4].split(b"\r\n")
        version, status = status_line.split(b" ", 2)[:2]
        headers = [(k.strip(), v.strip()) for k, _, v in (line.partition(b":") for line in lines)]
        fields = {k.lower(): v.lower() for k, v in headers}
        chunked = b"chunked" in fields.get(b"transfer-encoding", b"")
        length = 0 if request.method == "HEAD" or status in (b"204", b"304") else None
        if not chunked and b"content-length" in fields:
            length = int(fields[b"content-length"])
        keep_alive = version == b"HTTP/1.1" and fields.get(b"connection") != b"close"
        stream = _Body(self, key, conn, chunked, length, keep_alive)
        return httpx.Response(int(status), headers=headers, stream=stream, request=request,
                              extensions={"http_version": version})

    async def aclose(self) -> None:
        for pool in self.idle.values():
            for conn in pool:
                conn.close()
        self.idle.clear()
        await self.tls.aclose()
