"""Kafka principals as strings (`User:name`), shared by the listener edge and the authorizer."""

from __future__ import annotations

ANONYMOUS = "User:ANONYMOUS"


def parse_principal_list(value) -> list[str]:
    """`super.users` is `User:a;User:b` in Kafka (semicolons: principals may hold commas)."""
    if isinstance(value, list):
        value = ";".join(value)
    return [p.strip() for p in (value or "").split(";") if p.strip()]
