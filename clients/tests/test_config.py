"""One config mechanism for the three clients: the same error shapes (as Kafka's
ConfigException) for a bad integer, a bad choice and an unknown key, and typed values."""

import logging

import pytest

from clients.admin import AdminClient
from clients.admin.config import ADMIN
from clients.config import COMMON, ConfigError
from clients.consumer import Consumer
from clients.consumer.config import CONSUMER, parse_config
from clients.producer import Producer
from clients.producer.config import PRODUCER
from common.properties import ConfigError as CommonConfigError

BOOT = "127.0.0.1:1"


@pytest.mark.parametrize("make, key", [
    (lambda c: Producer(BOOT, c), "linger.ms"),
    (lambda c: Consumer(BOOT, c), "fetch.min.bytes"),
    (lambda c: AdminClient(BOOT, c), "default.api.timeout.ms"),
    (lambda c: Producer(BOOT, c), "request.timeout.ms"),       # COMMON, in every table
    (lambda c: Consumer(BOOT, c), "request.timeout.ms"),
    (lambda c: AdminClient(BOOT, c), "request.timeout.ms"),
])
def test_bad_integer_reads_the_same_for_every_client(make, key):
    with pytest.raises(ConfigError) as info:
        make({key: "abc"})
    assert str(info.value) == f"Invalid value abc for configuration {key}: not an integer"


@pytest.mark.parametrize("make, key, value, choices", [
    (lambda c: Producer(BOOT, c), "compression.type", "brotli", "none, gzip, snappy, lz4, zstd"),
    (lambda c: Consumer(BOOT, c), "auto.offset.reset", "smallest", "earliest, latest, none"),
    (lambda c: Consumer(BOOT, c), "isolation.level", "x", "read_uncommitted, read_committed"),
    (lambda c: Consumer(BOOT, c), "group.protocol", "eager", "classic, consumer"),
])
def test_bad_choice(make, key, value, choices):
    with pytest.raises(ConfigError) as info:
        make({key: value})
    assert str(info.value) == (f"Invalid value {value} for configuration {key}: "
                               f"must be one of {choices}")


def test_bad_boolean_and_validator_and_acks():
    with pytest.raises(ConfigError, match="^Invalid value yes for configuration "
                                          "enable.auto.commit: must be true or false$"):
        Consumer(BOOT, {"enable.auto.commit": "yes"})
    with pytest.raises(ConfigError, match="^Invalid value maybe for configuration "
                                          "enable.idempotence: must be true or false$"):
        Producer(BOOT, {"enable.idempotence": "maybe"})
    with pytest.raises(ConfigError, match="^Invalid value 0 for configuration batch.size: "
                                          "must be at least 1$"):
        Producer(BOOT, {"batch.size": 0})
    with pytest.raises(ConfigError, match="^Invalid value 2 for configuration acks: "
                                          "must be 0, 1, all or -1$"):
        Producer(BOOT, {"acks": "2"})
    with pytest.raises(ConfigError, match="^Invalid value '' for configuration "
                                          "group.remote.assignor: must be an assignor name"):
        Consumer(BOOT, {"group.protocol": "consumer", "group.remote.assignor": ""})


@pytest.mark.parametrize("table", [PRODUCER, CONSUMER, ADMIN])
def test_unknown_keys_kept_unless_strict(table):
    # kept and ignored by default (Kafka's clients only warn; one file serves several clients)
    assert table.parse({"foo.bar": "1"})["foo.bar"] == "1"
    assert table.unknown_keys({"foo.bar": 1, "client.id": "x"}) == ["foo.bar"]
    with pytest.raises(ConfigError) as info:
        table.parse({"client.id": "x", "foo.bar": "1"}, strict=True)
    assert str(info.value) == "Unknown configuration 'foo.bar'"


@pytest.mark.parametrize("table", [PRODUCER, CONSUMER, ADMIN])
def test_a_key_no_client_knows_is_warned_about(table, caplog):
    # Kafka's AbstractConfig.logUnused: the typo is named, the client still starts
    with caplog.at_level(logging.WARNING, logger="clients.config"):
        cfg = table.parse({"lingr.ms": "5", "client.id": "x"})
    assert cfg["lingr.ms"] == "5"
    assert [r.getMessage() for r in caplog.records] == [
        "The configuration 'lingr.ms' was supplied but isn't a known config."]


def test_a_key_of_another_client_kind_is_not_warned_about(caplog):
    # max.block.ms is the producer's, group.id the consumer's: a shared file is normal
    with caplog.at_level(logging.WARNING, logger="clients.config"):
        ADMIN.parse({"max.block.ms": "15000", "group.id": "g", "default.api.timeout.ms": "1"})
        PRODUCER.parse({"group.id": "g", "default.api.timeout.ms": "1"})
    assert caplog.records == []


def test_every_client_accepts_a_shared_file():
    # what the CLI hands every client it builds: producer, admin and security keys together
    shared = {"max.block.ms": "15000", "default.api.timeout.ms": "30000",
              "socket.connection.setup.timeout.ms": "5000", "security.protocol": "PLAINTEXT"}
    Producer(BOOT, shared)
    Consumer(BOOT, shared)
    AdminClient(BOOT, shared)


def test_errors_are_the_types_callers_catch():
    with pytest.raises(ValueError):                      # the consumer raised ValueError before
        Consumer(BOOT, {"max.poll.records": "many"})
    with pytest.raises(CommonConfigError):              # the CLI catches common's ConfigError
        AdminClient(BOOT, {"retry.backoff.ms": "-1"})


def test_typed_values_defaults_and_keyword_names():
    cfg = parse_config({"enable.auto.commit": "FALSE", "max.poll.records": " 7 "},
                       {"group_id": "g", "fetch_max_wait_ms": "100"})
    assert cfg["enable.auto.commit"] is False and cfg["max.poll.records"] == 7
    assert cfg["group.id"] == "g" and cfg["fetch.max.wait.ms"] == 100
    assert cfg["client.id"] == "raftka-consumer" and cfg["auto.offset.reset"] == "latest"
    assert cfg.explicit == {"enable.auto.commit", "max.poll.records", "group.id",
                            "fetch.max.wait.ms"}
    p = Producer(BOOT, {"acks": "all", "linger_ms": "7", "compression.type": "LZ4"})
    assert (p.acks, p.config["linger.ms"], p.config["compression.type"]) == (-1, 7, "lz4")
    assert p.config["client.id"] == "raftka" and p.config["batch.size"] == 16_384
    assert AdminClient(BOOT).config["default.api.timeout.ms"] == 60_000


def test_one_table_per_kind_on_the_common_keys():
    for table in (PRODUCER, CONSUMER, ADMIN):
        assert all(d.key in table for d in COMMON)
        assert all(d.doc for d in table), [d.key for d in table if not d.doc]
    # the consumer's own default wins over the common one
    assert CONSUMER.defaults()["client.id"] == "raftka-consumer"
