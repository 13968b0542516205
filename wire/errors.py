"""Kafka error codes as typed errors.

`DecodeError` is the one exception a peer's garbage can raise anywhere in `wire/`: a server
answers it by closing that connection, and nothing else.
"""


class DecodeError(ValueError):
    """Bytes from a peer that do not decode (truncated, oversized, malformed)."""
