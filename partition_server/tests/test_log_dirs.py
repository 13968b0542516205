"""DescribeLogDirs at the broker (handlers/log_dirs.py) without a cluster: which partitions are
described, their sizes, the v4 disk figures, and the answer encodes at every version we
advertise."""

from __future__ import annotations

import types

import trio

from partition_server.handlers import SUPPORTED
from partition_server.handlers.log_dirs import handle_describe_log_dirs
from wire.connection import Request
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS, RESPONSES


def _hosted(size, offline=False):
    return types.SimpleNamespace(log=types.SimpleNamespace(size_in_bytes=size), offline=offline)


def _hctx(tmp_path):
    parts = {("a", 0): _hosted(10), ("a", 1): _hosted(20), ("b", 0): _hosted(5),
             ("c", 0): _hosted(7, offline=True)}
    return types.SimpleNamespace(config={"log.dirs": [str(tmp_path)]},
                                 replicas=types.SimpleNamespace(partitions=parts))


def _ask(hctx, topics, version=4):
    cls = REQUESTS[ApiKey.DESCRIBE_LOG_DIRS]
    body = cls(topics=None if topics is None else [
        cls.DescribableLogDirTopic(topic=t, partitions=ps) for t, ps in topics.items()])
    body = cls.decode(body.encode(version), version)
    resp = trio.run(handle_describe_log_dirs, hctx,
                    Request(ApiKey.DESCRIBE_LOG_DIRS, version, 1, "t", None, body, 0))
    # what a client reads
    return RESPONSES[ApiKey.DESCRIBE_LOG_DIRS].decode(resp.encode(version), version)


def _sizes(resp):
    return {(t.name, p.partition_index): p.partition_size
            for r in resp.results for t in r.topics for p in t.partitions}


def test_every_hosted_partition_or_the_ones_named(tmp_path):
    hctx = _hctx(tmp_path)
    resp = _ask(hctx, None)
    assert resp.results[0].log_dir == str(tmp_path)
    assert _sizes(resp) == {("a", 0): 10, ("a", 1): 20, ("b", 0): 5}     # offline: no size
    assert resp.results[0].total_bytes > 0 and 0 <= resp.results[0].usable_bytes
    named = _ask(hctx, {"a": [1, 9], "zzz": [0]})
    assert _sizes(named) == {("a", 1): 20}         # not hosted here: left out, as Kafka


def test_every_advertised_version_encodes(tmp_path):
    lo, hi = SUPPORTED[ApiKey.DESCRIBE_LOG_DIRS]
    for v in range(lo, hi + 1):
        assert _sizes(_ask(_hctx(tmp_path), None, v)) == {("a", 0): 10, ("a", 1): 20,
                                                          ("b", 0): 5}
