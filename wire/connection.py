"""Sans-IO Kafka connections, in the style of h11: feed bytes in, get messages out.

`ServerConnection` turns received bytes into `Request`s (or `UnsupportedRequest` when a known API
arrives at a version this server does not implement) and frames responses. `ClientConnection`
frames requests with correlation ids and matches responses back to them.

Ordering: Kafka answers the requests of one connection in the order they arrived. The server side
enforces it: `send_response` for anything but the oldest unanswered request is a local error
(`ConnectionStateError`), and a request that gets no answer (acks=0 Produce) must be released with
`no_response`. Servers that want to work on several requests at once queue the answers themselves.

Errors: anything a peer sends that cannot be understood (bad size, truncated header, unknown api
key, undecodable body, correlation id mismatch) raises `wire.errors.DecodeError`, and nothing
else; the caller closes the connection. No sockets, threads or clocks here.
"""

from __future__ import annotations

import collections
import dataclasses

from wire import framing
from wire.errors import DecodeError, ErrorCode
from wire.messages import api_keys
from wire.messages.index_generated import REQUESTS, RESPONSES
from wire.primitives import INT16


class ConnectionStateError(RuntimeError):
    """Local misuse of a connection object (a bug in the caller, not the peer's fault)."""


@dataclasses.dataclass
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header: object
    body: object
    size: int                       # frame size in bytes, for quotas and metrics
    received_at: float = 0.0        # when its bytes were read (stamped by the socket edge)

    @property
    def name(self) -> str:
        return api_keys.api_name(self.api_key)


@dataclasses.dataclass
class UnsupportedRequest:
    """A known API at a version this server does not implement; body not decoded."""
    api_key: int
    api_version: int
    correlation_id: int
    size: int


class ServerConnection:
    def __init__(self, supported: dict[int, tuple[int, int]] | None = None,
                 max_frame_bytes: int = framing.DEFAULT_MAX_FRAME_BYTES):
        """`supported`: {api_key: (min, max)} this server implements (default: the schemas')."""
        self.supported = supported if supported is not None else {
            k: cls.VALID_VERSIONS for k, cls in REQUESTS.items()}
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._unanswered: collections.deque = collections.deque()

    def receive_data(self, data: bytes) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def next_request(self) -> Request | UnsupportedRequest | None:
        size = framing.frame_size(self._buf, self.max_frame_bytes)
        if size is None or len(self._buf) < 4 + size:
            return None
        # One copy out of the receive buffer, into a *writable* bytearray: a Produce request's
        # record batches are views into it, and the log stamps offsets into them in place.
        payload = memoryview(self._buf[4:4 + size])
        del self._buf[:4 + size]
        api_key, api_version = framing.peek_api(payload)
        if api_key not in REQUESTS:
            raise DecodeError(f"unknown api key {api_key}")
        lo, hi = self.supported.get(api_key, (0, -1))
        cls = REQUESTS[api_key]
        if not (lo <= api_version <= hi) or not cls.check_version(api_version):
            req = UnsupportedRequest(api_key, api_version, framing.peek_correlation_id(payload), size)
            self._unanswered.append(req.correlation_id)
            return req
        header, pos = framing.decode_request_header(
            payload, api_keys.request_header_version(api_key, api_version))
        body, _ = cls.decode_from(payload, pos, api_version)
        self._unanswered.append(header.correlation_id)
        return Request(api_key, api_version, header.correlation_id, header.client_id, header,
                       body, size)

    def _release(self, correlation_id: int) -> None:
        if not self._unanswered or self._unanswered[0] != correlation_id:
            raise ConnectionStateError(
                f"response for correlation id {correlation_id} is out of order "
                f"(oldest unanswered: {self._unanswered[0] if self._unanswered else None})")
        self._unanswered.popleft()

    def no_response(self, request) -> None:
        """Release a request that is answered with silence (acks=0 Produce)."""
        self._release(request.correlation_id)

    def send_response_chunks(self, request, response) -> list:
        """Frame `response` (a message, or pre-encoded body bytes) for `request`.

        Returns a list of bytes and opaque records objects (file ranges) in wire order.
        """
        self._release(request.correlation_id)
        header = framing.encode_response_header(
            request.correlation_id,
            api_keys.response_header_version(request.api_key, request.api_version))
        if isinstance(response, (bytes, bytearray)):
            body = [bytes(response)]
        else:
            body = response.encode_chunks(request.api_version, lenient=True)
        total = len(header) + sum(len(c) if isinstance(c, bytes) else c.size for c in body)
        first = framing.size_prefix(total) + header
        if body and isinstance(body[0], bytes):
            return [first + body[0]] + body[1:]
        return [first] + body

    def send_response(self, request, response) -> bytes:
        chunks = self.send_response_chunks(request, response)
        if any(not isinstance(c, bytes) for c in chunks):
            raise ConnectionStateError("response holds file ranges: use send_response_chunks")
        return b"".join(chunks)


def api_versions_body(supported: dict[int, tuple[int, int]], error_code: int = 0,
                      version: int = 0, **extra) -> bytes:
    """An ApiVersionsResponse body listing `supported`, encoded at `version`.

    For an ApiVersions request at a version we do not implement, Kafka answers at v0 with
    UNSUPPORTED_VERSION and the full list so the client can retry at a version both speak.
    """
    cls = RESPONSES[api_keys.API_VERSIONS]
    keys = [cls.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(supported.items())]
    return cls(error_code=error_code, api_keys=keys, **extra).encode(version)


def unsupported_api_versions_response(conn: ServerConnection, request: UnsupportedRequest) -> bytes:
    body = api_versions_body(conn.supported, ErrorCode.UNSUPPORTED_VERSION, 0)
    fake = Request(request.api_key, 0, request.correlation_id, None, None, None, request.size)
    return conn.send_response(fake, body)


@dataclasses.dataclass
class PendingRequest:
    api_key: int
    api_version: int
    correlation_id: int


class ClientConnection:
    def __init__(self, max_frame_bytes: int = framing.DEFAULT_MAX_FRAME_BYTES,
                 first_correlation_id: int = 1):
        self.max_frame_bytes = max_frame_bytes
        self._next_id = first_correlation_id
        self._buf = bytearray()
        self._pending: collections.deque[PendingRequest] = collections.deque()

    def send_request(self, message, version: int, client_id: str | None = "raftka",
                     expect_response: bool = True) -> bytes:
        api_key = message.API_KEY
        correlation_id = self._next_id
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        header = framing.RequestHeader(request_api_key=api_key, request_api_version=version,
                                       correlation_id=correlation_id, client_id=client_id)
        out = bytearray(4)
        header.encode_into(out, api_keys.request_header_version(api_key, version))
        message.encode_into(out, version)
        out[0:4] = framing.size_prefix(len(out) - 4)
        if expect_response:
            self._pending.append(PendingRequest(api_key, version, correlation_id))
        return bytes(out)

    def receive_data(self, data: bytes) -> None:
        self._buf += data

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def next_response(self):
        """(PendingRequest, decoded response) or None when more bytes are needed."""
        size = framing.frame_size(self._buf, self.max_frame_bytes)
        if size is None or len(self._buf) < 4 + size:
            return None
        payload = memoryview(self._buf[4:4 + size])
        del self._buf[:4 + size]
        if not self._pending:
            raise DecodeError("response received with no request in flight")
        pending = self._pending.popleft()
        header, pos = framing.ResponseHeader.decode_from(
            payload, 0, api_keys.response_header_version(pending.api_key, pending.api_version))
        if header.correlation_id != pending.correlation_id:
            raise DecodeError(f"correlation id {header.correlation_id} does not match the oldest "
                              f"request in flight ({pending.correlation_id})")
        cls = RESPONSES[pending.api_key]
        version = pending.api_version
        if (pending.api_key == api_keys.API_VERSIONS and len(payload) >= pos + 2
                and INT16.unpack_from(payload, pos)[0] == ErrorCode.UNSUPPORTED_VERSION):
            version = 0       # the server fell back to v0 to tell us which versions it has
        body, _ = cls.decode_from(payload, pos, version)
        return pending, body
