"""Broker components take the collaborators they use, not the broker (issue 18): the group and
transaction coordinators, the follower fetchers, the housekeeping loops and the metrics endpoint
are built here from a bare ReplicaManager, Purgatory, metadata image and config, with no Broker
anywhere. A source check keeps new code from taking the whole broker again: outside broker.py
(which builds everything) and the handler context's factory, no function in partition_server/
has a parameter named `broker` and no object keeps one as `self.broker`.
"""

from __future__ import annotations

import ast

import trio

from metadata_quorum.image import MetadataImage
from partition_server.config import BrokerConfig
from partition_server.group.coordinator import GroupCoordinator
from partition_server.housekeeping import isr_loop
from partition_server.log import LogConfig, PartitionLog
from partition_server.metrics import MetricSources, render
from partition_server.peers import PeerConnections
from partition_server.purgatory import Purgatory
from partition_server.replica_manager import ReplicaManager
from partition_server.replication.fetcher import FetcherManager
from partition_server.fetch_session import FetchSessionCache
from partition_server.txn.coordinator import TransactionCoordinator
from tests_architecture.sources import is_test, parse, source_files
from wire.errors import ErrorCode

# (path, function) allowed to take the broker: the one place that builds the components
ALLOWED = {("partition_server/handlers/context.py", "of")}


def test_no_partition_server_component_takes_the_broker():
    offenders = []
    for rel in source_files():
        if not rel.startswith("partition_server/") or is_test(rel) or \
                rel in ("partition_server/broker.py", "partition_server/testing.py"):
            continue
        for node in ast.walk(parse(rel)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in node.args.args + node.args.kwonlyargs]
                if "broker" in names and (rel, node.name) not in ALLOWED:
                    offenders.append(f"{rel}:{node.lineno} {node.name}(broker)")
            elif isinstance(node, ast.Attribute) and node.attr == "broker" and \
                    isinstance(node.value, ast.Name) and node.value.id == "self":
                offenders.append(f"{rel}:{node.lineno} self.broker")
    assert not offenders, offenders


def _parts(tmp_path):
    config = BrokerConfig.from_properties({"node.id": "1", "log.dirs": str(tmp_path),
                                           "controller.quorum.voters": "0@127.0.0.1:1"})
    replicas = ReplicaManager(1, lambda t, p, cfg: PartitionLog(str(tmp_path / f"{t}-{p}"),
                                                                LogConfig()))
    image = MetadataImage()
    calls = []

    async def call_controller(req, **kwargs):
        calls.append(req)
    return config, replicas, Purgatory(), (lambda: image), call_controller, calls


async def test_coordinators_are_built_and_answer_without_a_broker(tmp_path):
    config, replicas, purgatory, image, call_controller, calls = _parts(tmp_path)
    groups = GroupCoordinator(config, replicas, purgatory, image, call_controller,
                              PeerConnections(image, None, "lag"))
    allocated = []

    async def allocate():
        allocated.append(1)
        return 1000
    txn = TransactionCoordinator(config, replicas, purgatory, image, call_controller, allocate,
                                 groups, PeerConnections(image, None, "txn"))
    # no internal topics yet: not available, and finding a coordinator asks the controller to
    # create the topic
    assert groups.owns("g") == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert txn.owns("t") == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert (await groups.find("g"))[0] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert (await txn.find("t"))[0] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert [r.topics[0].name for r in calls] == ["__consumer_offsets", "__transaction_state"]
    groups.on_image()
    txn.on_image()
    assert txn.markers.broker_id == 1 and txn.offsets.groups is groups


async def test_fetcher_housekeeping_and_metrics_without_a_broker(tmp_path):
    config, replicas, purgatory, image, _, _ = _parts(tmp_path)
    replicas.apply_partition("t", None, 0, [1, 2], [1, 2], 1, 1, 1, {}, 1, 0)
    fetchers = FetcherManager(1, config, replicas, purgatory, image, None)
    fetchers.follow("t", 1, 2)
    assert fetchers.by_leader == {2: {("t", 1)}}
    sent = []

    async def alter_partition(changes):
        sent.extend(changes)
    with trio.move_on_after(0.6):
        await isr_loop(replicas, 2000, lambda b: True, alter_partition)
    groups = GroupCoordinator(config, replicas, purgatory, image, None, None)
    text = render(MetricSources(replicas, FetchSessionCache(10, 0), fetchers, groups,
                                lambda: None))
    assert 'raftka_partition_high_watermark{topic="t",partition="0"} 0' in text
