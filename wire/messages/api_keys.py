"""Api keys → message classes, header versions and listener roles.

Which versions a server *implements* is the server's business (it advertises them in
ApiVersions); this module only knows what the schemas define.
"""

from __future__ import annotations

from wire.messages.api_keys_generated import ApiKey
from wire.messages.index_generated import REQUESTS, RESPONSES

__all__ = ["ApiKey", "api_name", "apis_for", "listeners", "request_class",
           "request_header_version", "response_class", "response_header_version"]

API_VERSIONS = ApiKey.API_VERSIONS
CONTROLLED_SHUTDOWN = ApiKey.CONTROLLED_SHUTDOWN


def request_class(api_key: int):
    return REQUESTS[api_key]


def response_class(api_key: int):
    return RESPONSES[api_key]


def api_name(api_key: int) -> str:
    cls = REQUESTS.get(api_key)
    return cls.NAME[: -len("Request")] if cls else f"Unknown({api_key})"


def request_header_version(api_key: int, api_version: int) -> int:
    """v2 (flexible) when the request version is flexible, else v1; ControlledShutdown v0 → v0."""
    if api_key == CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    return 2 if REQUESTS[api_key].is_flexible(api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """v1 when flexible, else v0 — except ApiVersions, always v0 so any client can read it."""
    if api_key == API_VERSIONS:
        return 0
    return 1 if RESPONSES[api_key].is_flexible(api_version) else 0


def listeners(api_key: int) -> tuple[str, ...]:
    """The process roles that serve this API per the schema (broker, controller, zkBroker)."""
    return REQUESTS[api_key].LISTENERS


def apis_for(role: str) -> list[int]:
    return sorted(k for k, cls in REQUESTS.items() if role in cls.LISTENERS)
