"""The producer's configuration: Kafka's keys and defaults (`PRODUCER`), and the rules that tie
idempotence, acks, retries, in-flight requests and transactions together (`idempotence`)."""

from __future__ import annotations

from typing import NamedTuple

from clients.config import (BOOLEAN, COMMON, INT, STRING, ConfigDef, ConfigDefs, ConfigError,
                            ConfigType, at_least, choice)

# compression.type -> the codec id in a record batch's attributes
COMPRESSION = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _acks(v) -> int:
    s = str(v).strip().lower()
    if s in ("all", "-1"):
        return -1
    if s in ("0", "1"):
        return int(s)
    raise ValueError("must be 0, 1, all or -1")


PRODUCER = ConfigDefs(
    "producer", COMMON,
    ConfigDef("acks", ConfigType("acks", _acks), -1, None,
              "replicas that must have a batch before it is acknowledged: 0, 1 or all (-1)"),
    ConfigDef("batch.size", INT, 16_384, at_least(1), "bytes of records per partition batch"),
    ConfigDef("linger.ms", INT, 5, at_least(0), "ms a batch waits for more records"),
    ConfigDef("buffer.memory", INT, 32 * 1024 * 1024, at_least(1),
              "bytes of unsent batches before send blocks"),
    ConfigDef("max.block.ms", INT, 60_000, None,
              "ms send may block for buffer space or the topic's metadata"),
    ConfigDef("max.request.size", INT, 1_048_576, at_least(1),
              "bytes of one Produce request (and so of one record)"),
    ConfigDef("compression.type", choice(*COMPRESSION, lower=True), "none", None,
              "codec of the batches: none, gzip, snappy, lz4 or zstd"),
    ConfigDef("retries", INT, 2_147_483_647, at_least(0), "resends of a failed batch"),
    ConfigDef("delivery.timeout.ms", INT, 120_000, None,
              "ms from send to the record's outcome, retries included"),
    ConfigDef("enable.idempotence", BOOLEAN, True, None,
              "producer id + sequence numbers, so retries write each batch once"),
    ConfigDef("max.in.flight.requests.per.connection", INT, 5, at_least(1),
              "Produce requests outstanding per broker (at most 5 with idempotence)"),
    ConfigDef("partitioner.ignore.keys", BOOLEAN, False, None,
              "place keyed records like keyless ones (sticky) instead of by murmur2 of the key"),
    ConfigDef("transactional.id", STRING, None, None,
              "enables transactions (and implies idempotence)"),
    ConfigDef("transaction.timeout.ms", INT, 60_000, at_least(1),
              "ms the coordinator lets a transaction stay open"),
)


class Idempotence(NamedTuple):
    idempotent: bool
    transactional_id: str | None


def idempotence(cfg) -> Idempotence:
    """Kafka's rules: idempotence (the default) needs acks=all, retries > 0 and at most 5
    requests in flight. Left at its default it quietly gives way to settings that contradict
    it; asked for explicitly, or implied by transactional.id, a contradiction is a ConfigError."""
    explicit = cfg.explicit
    idem = cfg["enable.idempotence"]
    if idem and cfg["acks"] != -1:
        if "enable.idempotence" in explicit:
            raise ConfigError("enable.idempotence=true needs acks=all")
        idem = False
    if idem and cfg["retries"] == 0 and "enable.idempotence" in explicit:
        raise ConfigError("enable.idempotence=true needs retries > 0")
    tid = cfg["transactional.id"] or None
    if tid:
        # transactional.id implies idempotence (Kafka: and refuses settings that contradict it)
        if "enable.idempotence" in explicit and not cfg["enable.idempotence"]:
            raise ConfigError("transactional.id needs enable.idempotence=true")
        if cfg["acks"] != -1:
            raise ConfigError("transactional.id needs acks=all")
        if cfg["retries"] == 0:
            raise ConfigError("transactional.id needs retries > 0")
        idem = True
    idem = idem and cfg["retries"] > 0
    if idem and cfg["max.in.flight.requests.per.connection"] > 5:
        # the broker remembers the last 5 batches per producer: more in flight could make a
        # retried duplicate look like a gap (Kafka refuses the same)
        if "enable.idempotence" in explicit or tid:
            raise ConfigError("idempotence needs max.in.flight.requests.per.connection <= 5")
        idem = False
    return Idempotence(idem, tid)
