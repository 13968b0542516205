"""The answer to a request whose handler failed unexpectedly: UNKNOWN_SERVER_ERROR, shaped
like the request (Kafka's `AbstractRequest.getErrorResponse`), instead of a closed connection.

A client that loses its connection retries everything in flight on it, perhaps against the same
bug, and learns nothing; an error answer fails just that request, per partition where the API
answers per partition, and the client's own error handling takes over. Kafka writes one
getErrorResponse per request type; here one mirror covers them all, from the schemas: every
response array is filled from the request array at the same level whose items share the most
key fields (topic name / id, partition index, group id, resource name ...) or else from the
request's only array there (one answer per entry, like Kafka's), and every
`error_code` field gets UNKNOWN_SERVER_ERROR. A response with neither an error code nor a
mirrored array to carry one (so the client could not tell the failure) gives None: the caller
then closes the connection as before.
"""

from __future__ import annotations

from wire.errors import ErrorCode
from wire.messages.runtime import Struct

# the same key under a different name in requests and responses
_ALIASES = {"partition": "partition_index", "partition_index": "partition_index",
            "index": "partition_index", "topic": "name", "name": "name",
            "resource_name": "resource_name", "group_id": "group_id", "topic_id": "topic_id",
            "key": "key", "transactional_id": "transactional_id", "member_id": "member_id"}
CODE = int(ErrorCode.UNKNOWN_SERVER_ERROR)


def _keys(cls) -> dict[str, str]:
    """{canonical key: field name} of the scalar key fields of a struct class."""
    return {_ALIASES[f.name]: f.name for f in cls.FIELDS
            if f.name in _ALIASES and not f.is_array and f.struct is None}


def _fill(resp_cls, req_obj, version: int, message: str | None):
    """A `resp_cls` item mirroring `req_obj` (a request struct, or None at the leaves)."""
    out = resp_cls()
    carried = False
    if req_obj is not None:
        src = _keys(type(req_obj))
        for canon, name in _keys(resp_cls).items():
            if canon in src:
                setattr(out, name, getattr(req_obj, src[canon]))
    for f in resp_cls.FIELDS:
        if not f.present(version):
            continue
        if f.name == "error_code":
            out.error_code, carried = CODE, True
        elif f.name == "error_message" and f.nullable is not None and message is not None:
            out.error_message = message
        elif f.is_array and f.struct is not None and req_obj is not None:
            source = _match(f.struct, req_obj, version)
            if source is not None:
                items = [_fill(f.struct, item if source.struct is not None else None, version,
                               message) for item in getattr(req_obj, source.name) or ()]
                if source.struct is None:
                    # the request lists bare keys (group ids, partition indexes ...): one
                    # answer each, its key field set to the key
                    keys = [k for k in _keys(f.struct).values()
                            if next(x for x in f.struct.FIELDS if x.name == k).elem == source.elem]
                    for (item, _), key in zip(items, getattr(req_obj, source.name) or ()):
                        if keys:
                            setattr(item, keys[0], key)
                setattr(out, f.name, [item for item, _ in items])
                carried = carried or any(c for _, c in items)
        elif getattr(out, f.name) is None and not (f.nullable and f.nullable[0] <= version
                                                  <= f.nullable[1]):
            # a default that this version cannot encode as null: the empty value instead
            if f.is_array:
                setattr(out, f.name, [])
            elif f.struct is not None:
                setattr(out, f.name, _fill(f.struct, None, version, message)[0])
            elif f.elem in ("records", "bytes"):
                setattr(out, f.name, b"")
            elif f.elem == "string":
                setattr(out, f.name, "")
    return out, carried


def _match(resp_item_cls, req_obj, version: int):
    """The request array field whose items share the most key fields with `resp_item_cls`;
    failing that, the request's only array at this level (one answer per entry, in order)."""
    want = set(_keys(resp_item_cls))
    arrays = [f for f in type(req_obj).FIELDS if f.is_array and f.present(version)]
    best, best_shared = None, 0
    for f in arrays:
        if f.struct is None:
            continue
        shared = len(want & set(_keys(f.struct)))
        if shared > best_shared:
            best, best_shared = f, shared
    if best is None and len(arrays) == 1:
        best = arrays[0]
    return best


def error_response(response_cls, request_body: Struct, version: int, message: str | None = None):
    """UNKNOWN_SERVER_ERROR shaped like `request_body`, or None if the API has nowhere to say it."""
    out, carried = _fill(response_cls, request_body, version, message)
    return out if carried else None
