"""Client-side framing for the few Kafka APIs the connector speaks, importing only their codecs.

Why not `wire.connection.ClientConnection`: it (through `wire.framing` and `api_keys`) imports
`wire.messages.index_generated`, every generated message class, ~0.4 s of CPU. Spark starts a
fresh Python process for each streaming query's planner (the Python data source's
`python_streaming_source_runner`), so that import was paid by every query, on top of Spark's own
~0.6 s. Here the message module of an API is imported when that API is first used: a planner
imports ApiVersions, Metadata and ListOffsets, an executor Fetch, a sink task Produce.

The bytes are the same as `wire.connection` makes: a 4-byte size, request header v1 (v2 for a
flexible request version), and response header v0 (v1 for flexible, except ApiVersions, always
v0). Answers are read strictly in order, one request at a time (`BrokerSocket` in kafka_io).
"""

from __future__ import annotations

import importlib
import struct

from wire.errors import DecodeError, ErrorCode
# the generated enum alone (wire.messages.api_keys would import every message class)
from wire.messages.api_keys_generated import ApiKey

API_PRODUCE, API_FETCH = ApiKey.PRODUCE, ApiKey.FETCH
API_LIST_OFFSETS, API_METADATA = ApiKey.LIST_OFFSETS, ApiKey.METADATA
API_SASL_HANDSHAKE, API_SASL_AUTHENTICATE = ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE
API_API_VERSIONS = ApiKey.API_VERSIONS

# the generated module stem of each API this package uses (wire/messages/<stem>_*_generated.py)
_STEMS = {API_PRODUCE: "produce", API_FETCH: "fetch", API_LIST_OFFSETS: "list_offsets",
          API_METADATA: "metadata", API_SASL_HANDSHAKE: "sasl_handshake",
          API_API_VERSIONS: "api_versions", API_SASL_AUTHENTICATE: "sasl_authenticate"}

_SIZE = struct.Struct(">i")
_INT16 = struct.Struct(">h")
MAX_FRAME_BYTES = 100 * 1024 * 1024       # Kafka's socket.request.max.bytes default

_classes: dict[tuple[int, str], type] = {}


def _message_class(api_key: int, kind: str) -> type:
    """The generated Request/Response class of `api_key` (imported on first use)."""
    cls = _classes.get((api_key, kind))
    if cls is None:
        stem = _STEMS.get(api_key)
        if stem is None:
            # an API this package does not use itself (the tests' admin calls): the full index
            from wire.messages.index_generated import REQUESTS, RESPONSES
            cls = (REQUESTS if kind == "request" else RESPONSES)[api_key]
        else:
            module = importlib.import_module(f"wire.messages.{stem}_{kind}_generated")
            cls = next(c for c in vars(module).values()
                       if isinstance(c, type) and getattr(c, "API_KEY", None) == api_key)
        _classes[(api_key, kind)] = cls
    return cls


def request_class(api_key: int) -> type:
    return _message_class(api_key, "request")


def response_class(api_key: int) -> type:
    return _message_class(api_key, "response")


def _headers():
    from wire.messages.request_header_generated import RequestHeader
    from wire.messages.response_header_generated import ResponseHeader
    return RequestHeader, ResponseHeader


class ClientFraming:
    """Encodes requests and decodes the answer to the oldest one; no I/O."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES):
        self.max_frame_bytes = max_frame_bytes
        self._next_id = 1
        self._pending: tuple[int, int, int] | None = None   # api_key, version, correlation id

    def encode_request(self, message, version: int, client_id: str | None) -> bytes:
        if self._pending is not None:
            raise RuntimeError("one request at a time: the previous answer was not read")
        request_header, _ = _headers()
        api_key = message.API_KEY
        correlation_id = self._next_id
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        header = request_header(request_api_key=api_key, request_api_version=version,
                                correlation_id=correlation_id, client_id=client_id)
        out = bytearray(4)
        header.encode_into(out, 2 if message.is_flexible(version) else 1)
        message.encode_into(out, version)
        out[0:4] = _SIZE.pack(len(out) - 4)
        self._pending = (api_key, version, correlation_id)
        return bytes(out)

    def frame_size(self, prefix: bytes) -> int:
        """The size of the answer whose 4-byte prefix is `prefix`; DecodeError if absurd."""
        size, = _SIZE.unpack(prefix)
        if size < 0 or size > self.max_frame_bytes:
            raise DecodeError(f"response frame of {size} bytes (limit {self.max_frame_bytes})")
        return size

    def decode_response(self, payload):
        """The decoded answer to the request in flight, from its frame (without the prefix)."""
        if self._pending is None:
            raise DecodeError("response received with no request in flight")
        api_key, version, correlation_id = self._pending
        self._pending = None
        _, response_header = _headers()
        cls = response_class(api_key)
        flexible = api_key != API_API_VERSIONS and cls.is_flexible(version)
        header, pos = response_header.decode_from(payload, 0, 1 if flexible else 0)
        if header.correlation_id != correlation_id:
            raise DecodeError(f"correlation id {header.correlation_id} does not match the "
                              f"request in flight ({correlation_id})")
        if (api_key == API_API_VERSIONS and len(payload) >= pos + 2
                and _INT16.unpack_from(payload, pos)[0] == ErrorCode.UNSUPPORTED_VERSION):
            version = 0       # the broker fell back to v0 to say which versions it has
        body, _ = cls.decode_from(payload, pos, version)
        return body
