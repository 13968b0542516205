"""A forwarded admin request sent to a controller that then never answered (timed out, the
connection lost) may still take effect; when the broker retries it elsewhere, an answer saying
"it was already so" may be that first attempt's doing, so the client gets REQUEST_TIMED_OUT
(in doubt) instead of a false TOPIC_ALREADY_EXISTS / UNKNOWN_TOPIC_OR_PARTITION. Found by the
campaign (--overlap, seed 31, round 25; see metadata_quorum/tests/test_commit_in_doubt.py)."""

import trio

from partition_server.controller_client import ControllerClient
from partition_server.handlers.admin import in_doubt
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS, RESPONSES

CREATE = RESPONSES[ApiKey.CREATE_TOPICS]
DELETE = RESPONSES[ApiKey.DELETE_TOPICS]


def test_already_answers_after_an_attempt_in_doubt_become_timed_out():
    resp = in_doubt(ApiKey.CREATE_TOPICS, CREATE(topics=[
        CREATE.CreatableTopicResult(name="a", error_code=ErrorCode.TOPIC_ALREADY_EXISTS),
        CREATE.CreatableTopicResult(name="b", error_code=0),
        CREATE.CreatableTopicResult(name="c", error_code=ErrorCode.INVALID_REPLICATION_FACTOR)]))
    assert [t.error_code for t in resp.topics] == [ErrorCode.REQUEST_TIMED_OUT, 0,
                                                   ErrorCode.INVALID_REPLICATION_FACTOR]
    assert "outcome is unknown" in resp.topics[0].error_message
    resp = in_doubt(ApiKey.DELETE_TOPICS, DELETE(responses=[
        DELETE.DeletableTopicResult(name="a", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]))
    assert resp.responses[0].error_code == ErrorCode.REQUEST_TIMED_OUT


class Conn:
    def __init__(self, answer):
        self.answer = answer

    async def request(self, message, version, timeout_s):
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    async def aclose(self):
        pass


async def call(conns: dict):
    client = ControllerClient(0, {3000: ("h", 1), 3001: ("h", 2), 3002: ("h", 3)}, "h", 9, None)

    async def conn(voter, pool=None):
        if conns[voter] is None:
            raise OSError("connection refused")           # never sent: no doubt
        return conns[voter]
    client._conn = conn
    doubt: list = []
    req = REQUESTS[ApiKey.CREATE_TOPICS](topics=[], timeout_ms=1)
    return await client.call_active(req, timeout_s=5, doubt=doubt), doubt


async def test_call_active_records_attempts_sent_and_unanswered():
    answered = CREATE(topics=[])
    assert await call({3000: Conn(trio.TooSlowError()), 3001: Conn(answered), 3002: None}) == \
        (answered, [3000])
    assert await call({3000: None, 3001: Conn(answered), 3002: None}) == \
        (answered, [])                                    # refused connections: never sent
    assert await call({3000: Conn(ConnectionResetError()), 3001: None,
                       3002: Conn(answered)}) == (answered, [3000])
