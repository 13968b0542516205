"""The admin client's configuration: Kafka's keys and defaults (`ADMIN`)."""

from __future__ import annotations

from clients.config import COMMON, INT, ConfigDef, ConfigDefs

ADMIN = ConfigDefs(
    "admin", COMMON,
    ConfigDef("default.api.timeout.ms", INT, 60_000, None,
              "ms one admin call may take, retries included"),
)
