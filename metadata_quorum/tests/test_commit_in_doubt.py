"""A command whose records were proposed but whose commit is unknown (timed out without a
quorum, leadership changed while it waited) may still commit under the next leader. Found by
the campaign (`--overlap`, seed 31 round 25: a controller killed and another isolated at once):
CreateTopics answered NOT_CONTROLLER after its commit timed out, the broker retried it at the
next active controller once the quorum was back, and the client got TOPIC_ALREADY_EXISTS for
the topic its own first attempt had created. Client-facing topic mutations now answer
REQUEST_TIMED_OUT (in doubt); NOT_CONTROLLER stays for what certainly never reached the log.
"""

import pytest

from metadata_quorum import controller_handlers as h
from metadata_quorum import records as r
from metadata_quorum import service
from metadata_quorum.service import CommitInDoubt, NotActive
from metadata_quorum.tests.test_service_transactions import make_service
from pysyncobj.config import FAIL_REASON
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS


class Req:
    def __init__(self, api_key, body, version=5):
        self.api_key, self.body, self.api_version = api_key, body, version


def create_req(name):
    cls = REQUESTS[ApiKey.CREATE_TOPICS]
    return Req(ApiKey.CREATE_TOPICS, cls(topics=[cls.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1)], timeout_ms=5000))


def delete_req(name):
    cls = REQUESTS[ApiKey.DELETE_TOPICS]
    return Req(ApiKey.DELETE_TOPICS, cls(topic_names=[name], timeout_ms=5000), 4)


async def ready_service():
    svc = await make_service()
    await svc.mutate(lambda now: ([r.RegisterBrokerRecord(0, "i", 1, "h", 1, fenced=False)], None))
    return svc


def answer_with(svc, code):
    """From now on the quorum answers each proposal with `code` (None: never answers)."""
    def propose(batch, callback):
        if code is not None:
            callback(None, code)
    svc.quorum.propose = propose


async def service_with_old_topic():
    svc = await ready_service()
    await svc.mutate(lambda now: svc.controller.create_topics(
        [{"name": "old", "num_partitions": 1, "replication_factor": 1, "assignments": None,
          "configs": {}}], False))
    return svc


@pytest.mark.parametrize("code", [None, FAIL_REASON.LEADER_CHANGED])
async def test_topic_mutations_in_doubt_answer_request_timed_out(monkeypatch, code):
    # a fresh service for each command: a failed commit renounces (the pipeline starts again
    # with the next activation, which this stand-in quorum never commits)
    monkeypatch.setattr(service, "COMMIT_TIMEOUT_S", 0.05)
    svc = await service_with_old_topic()
    answer_with(svc, code)
    with pytest.raises(CommitInDoubt):
        await svc.mutate(lambda now: ([r.RegisterBrokerRecord(1, "j", 1, "h", 2)], None))
    svc = await service_with_old_topic()
    answer_with(svc, code)
    resp = await h.handle_create_topics(svc, create_req("t"))
    assert [t.error_code for t in resp.topics] == [ErrorCode.REQUEST_TIMED_OUT]
    svc = await service_with_old_topic()
    answer_with(svc, code)
    resp = await h.handle_delete_topics(svc, delete_req("old"))
    assert [t.error_code for t in resp.responses] == [ErrorCode.REQUEST_TIMED_OUT]


@pytest.mark.parametrize("code", [FAIL_REASON.NOT_LEADER, FAIL_REASON.QUEUE_FULL,
                                  FAIL_REASON.MISSING_LEADER, FAIL_REASON.DISCARDED])
async def test_never_appended_stays_not_controller_so_brokers_retry(code):
    svc = await ready_service()
    answer_with(svc, code)
    with pytest.raises(NotActive) as info:
        await svc.mutate(lambda now: ([r.RegisterBrokerRecord(1, "j", 1, "h", 2)], None))
    assert not isinstance(info.value, CommitInDoubt)
    svc = await ready_service()
    answer_with(svc, code)
    resp = await h.handle_create_topics(svc, create_req("t"))
    assert [t.error_code for t in resp.topics] == [ErrorCode.NOT_CONTROLLER]


async def test_broker_mutations_in_doubt_keep_not_controller(monkeypatch):
    """Heartbeats, registrations, ISR changes are retried by the broker's own loops, which
    know NOT_CONTROLLER; only the client-facing topic mutations changed."""
    monkeypatch.setattr(service, "COMMIT_TIMEOUT_S", 0.05)
    svc = await ready_service()
    answer_with(svc, None)
    result, err = await h._mutate(svc, lambda now: ([r.RegisterBrokerRecord(1, "j", 1, "h", 2)],
                                                    None))
    assert result is None and err == ErrorCode.NOT_CONTROLLER
