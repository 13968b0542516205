"""UnregisterBroker (KIP-631, API key 64) as KRaft does it: the controller's handler over the
wire types, its UnregisterBrokerRecord and replay, what stays behind when the broker still hosts
replicas, and the broker side (an unregistered broker stays out instead of re-registering)."""

from __future__ import annotations

import trio

from metadata_quorum import controller_handlers as ch
from metadata_quorum import records as r
from metadata_quorum.controller.quorum_controller import QuorumController
from metadata_quorum.image import MetadataImage
from partition_server.controller_client import ControllerClient
from partition_server.handlers.cluster import live_brokers
from wire.connection import Request
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS, RESPONSES


class FakeService:
    """Just enough of ControllerService: commands commit (through the record encoding) and
    replay at once; `active` False answers NOT_CONTROLLER as the real one does."""

    def __init__(self):
        self.controller = QuorumController()
        self.offset = 0
        self.active = True
        self.committed: list = []

    async def mutate(self, command):
        from metadata_quorum.service import NotActive
        if not self.active:
            raise NotActive("not the active controller")
        records, result = command(0)
        for rec in records:
            rec = r.decode_record(r.encode_record(rec))
            self.committed.append(rec)
            self.controller.replay(self.offset, rec)
            self.offset += 1
        return result

    def run(self, command):
        trio.run(self.mutate, command)


def _unregister(svc, broker_id):
    body = REQUESTS[ApiKey.UNREGISTER_BROKER](broker_id=broker_id)
    # through the bytes of version 0, as a client sends it
    body = REQUESTS[ApiKey.UNREGISTER_BROKER].decode(body.encode(0), 0)
    return trio.run(ch.handle_unregister_broker, svc,
                    Request(ApiKey.UNREGISTER_BROKER, 0, 1, "test", None, body, 0))


def _cluster(n=4):
    svc = FakeService()
    c = svc.controller
    for b in range(n):
        svc.run(lambda now: c.register_broker(b, f"inc{b}", "127.0.0.1", 9092 + b, None, now))
        epoch = c.image.brokers[b].broker_epoch
        svc.run(lambda now: c.broker_heartbeat(b, epoch, svc.offset, False, False, now))
    svc.run(lambda now: c.create_topics([
        {"name": "t", "assignments": {0: [1, 2, 3], 1: [0, 1, 2]}},
        {"name": "one", "assignments": {0: [3]}}]))
    return svc


def test_unknown_broker_is_refused_and_nothing_is_written():
    svc = _cluster()
    before = len(svc.committed)
    resp = _unregister(svc, 42)
    assert isinstance(resp, RESPONSES[ApiKey.UNREGISTER_BROKER])
    assert resp.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
    assert resp.error_message == "Broker ID 42 is not currently registered."
    assert len(svc.committed) == before


def test_unregistered_broker_leaves_metadata_its_leaderships_and_isrs():
    svc = _cluster()
    assert 0 in {b.broker_id for b in live_brokers(svc.controller.image)}
    resp = _unregister(svc, 0)
    assert (resp.error_code, resp.error_message) == (ErrorCode.NONE, None)
    assert isinstance(svc.committed[-1], r.UnregisterBrokerRecord)
    assert svc.committed[-1].broker_id == 0
    image = svc.controller.image
    assert 0 not in image.brokers
    assert 0 not in {b.broker_id for b in live_brokers(image)}      # gone from Metadata
    p = image.topics["t"].partitions[1]
    # KRaft keeps the replica in the replica list (under-replicated until reassigned); it
    # leaves the ISR and the leadership
    assert p.replicas == (0, 1, 2) and 0 not in p.isr and p.leader in (1, 2)
    # a second time: it is not registered any more
    assert _unregister(svc, 0).error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
    # a replay from the records gives the same image
    fresh = MetadataImage().apply_all(0, svc.committed)
    assert fresh.same_state(image)


def test_last_isr_member_unregistered_keeps_the_isr_and_goes_offline():
    svc = _cluster()
    _unregister(svc, 3)
    p = svc.controller.image.topics["one"].partitions[0]     # RF 1 on broker 3
    assert p.replicas == (3,) and p.isr == (3,) and p.leader == -1


def test_not_controller_is_returned_top_level():
    svc = _cluster()
    svc.active = False
    assert _unregister(svc, 0).error_code == ErrorCode.NOT_CONTROLLER
    assert 0 in svc.controller.image.brokers


def test_unregister_is_supported_on_both_listeners():
    from partition_server.handlers import SUPPORTED as BROKER_SUPPORTED
    assert ch.SUPPORTED[ApiKey.UNREGISTER_BROKER] == (0, 0)
    assert BROKER_SUPPORTED[ApiKey.UNREGISTER_BROKER] == (0, 0)


def _client_with(image: MetadataImage, epoch: int) -> ControllerClient:
    c = ControllerClient(5, {3000: ("127.0.0.1", 1)}, "127.0.0.1", 9, None)
    c.image, c.broker_epoch = image, epoch
    return c


def _registered(epoch=7):
    return MetadataImage().apply_all(0, [r.RegisterBrokerRecord(5, "x", epoch, "h", 1)])


def test_broker_knows_it_was_unregistered_only_from_its_image():
    async def check(client, seen, drop):
        client._seen_registered = seen
        if drop:
            client.image = client.image.apply(1, r.UnregisterBrokerRecord(5, 7))
        return await client._was_unregistered(wait_s=0.3)
    # the record removed us from our image: stay out
    assert trio.run(check, _client_with(_registered(), 7), True, True)
    # the controller lost its state (our image still has us): register again
    assert not trio.run(check, _client_with(_registered(), 7), True, False)
    # never saw our own registration (e.g. still catching up): register again
    assert not trio.run(check, _client_with(_registered(), 7), False, True)
