"""Admin mutations forwarded to the active controller (ARCHITECTURE.md: clients never talk to
controllers). The request goes on at the client's own version and the controller's answer comes
back unchanged; if no controller answers in time, every item gets REQUEST_TIMED_OUT. After a
successful CreateTopics/DeleteTopics/CreatePartitions the broker waits (bounded) until its own
metadata image shows the change, so a client's next Metadata request here sees it.
"""

from __future__ import annotations

import trio

from partition_server.controller_client import ControllerUnavailable
from partition_server.handlers.context import HandlerContext
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS, RESPONSES

TIMED_OUT = ErrorCode.REQUEST_TIMED_OUT


def _first_error(api_key: int, resp) -> int:
    items = {19: "topics", 20: "responses", 37: "results", 33: "responses", 44: "responses",
             30: "results", 31: "filter_results"}
    if api_key in items:
        return next((x.error_code for x in getattr(resp, items[api_key])), 0)
    # AlterPartitionReassignments, ListPartitionReassignments and the rest: NOT_CONTROLLER is
    # top-level
    return getattr(resp, "error_code", 0)


def _timeout_response(api_key: int, body):
    cls = RESPONSES[api_key]
    if api_key == ApiKey.CREATE_TOPICS:
        return cls(topics=[cls.CreatableTopicResult(name=t.name, error_code=TIMED_OUT)
                           for t in body.topics])
    if api_key == ApiKey.DELETE_TOPICS:
        names = list(body.topic_names) + [t.name for t in body.topics if t.name]
        return cls(responses=[cls.DeletableTopicResult(name=n, error_code=TIMED_OUT) for n in names])
    if api_key == ApiKey.CREATE_PARTITIONS:
        return cls(results=[cls.CreatePartitionsTopicResult(name=t.name, error_code=TIMED_OUT)
                            for t in body.topics])
    if api_key == ApiKey.CREATE_ACLS:
        return cls(results=[cls.AclCreationResult(error_code=TIMED_OUT) for _ in body.creations])
    if api_key == ApiKey.DELETE_ACLS:
        return cls(filter_results=[cls.DeleteAclsFilterResult(error_code=TIMED_OUT)
                                   for _ in body.filters])
    if api_key in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
        return cls(responses=[cls.AlterConfigsResourceResponse(
            error_code=TIMED_OUT, resource_type=r.resource_type, resource_name=r.resource_name)
            for r in body.resources])
    return cls(error_code=TIMED_OUT)


# Answers that say "it was already so": after an attempt in doubt they may be that attempt's own
# doing, so they are no longer certain (REQUEST_TIMED_OUT: the client learns it is in doubt)
_ALREADY = {ApiKey.CREATE_TOPICS: ("topics", {ErrorCode.TOPIC_ALREADY_EXISTS}),
            ApiKey.DELETE_TOPICS: ("responses", {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                 ErrorCode.UNKNOWN_TOPIC_ID})}


def in_doubt(api_key: int, resp):
    """`resp` after an earlier attempt of the same request was sent and never answered."""
    if api_key in _ALREADY:
        field, codes = _ALREADY[api_key]
        for item in getattr(resp, field):
            if item.error_code in codes:
                item.error_code = TIMED_OUT
                item.error_message = ("the request was retried after an attempt that may "
                                      "have taken effect: its outcome is unknown")
    return resp


async def forward(hctx: HandlerContext, req):
    api_key = req.api_key
    doubt: list = []
    try:
        resp = await hctx.client.call_active(req.body, timeout_s=15, version=req.api_version,
                                               error_of=lambda r: _first_error(api_key, r),
                                               doubt=doubt)
    except ControllerUnavailable:
        return _timeout_response(api_key, req.body)
    if doubt:
        resp = in_doubt(api_key, resp)
    if (api_key in (ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS)
            and not getattr(req.body, "validate_only", False)):
        await _await_metadata(hctx, api_key, req.body, resp)
    return resp


async def _await_metadata(hctx: HandlerContext, api_key, body, resp,
                          timeout_s: float = 5.0) -> None:
    def visible() -> bool:
        image = hctx.image
        if api_key == ApiKey.CREATE_TOPICS:
            return all(t.name in image.topics for t in resp.topics if t.error_code == 0)
        if api_key == ApiKey.DELETE_TOPICS:
            return all(t.name not in image.topics for t in resp.responses
                       if t.error_code == 0 and t.name)
        counts = {t.name: t.count for t in body.topics}
        return all(len(image.topics[r.name].partitions) >= counts[r.name]
                   for r in resp.results if r.error_code == 0 and r.name in image.topics)
    with trio.move_on_after(timeout_s):
        while not visible():
            await hctx.client.image_changed.wait()


async def auto_create(hctx: HandlerContext, names: list[str]) -> None:
    """auto.create.topics.enable: create with the broker's defaults, wait for the metadata."""
    cls = REQUESTS[ApiKey.CREATE_TOPICS]
    req = cls(topics=[cls.CreatableTopic(name=n, num_partitions=hctx.config["num.partitions"],
                                         replication_factor=hctx.config["default.replication.factor"])
                      for n in names], timeout_ms=10000)
    try:
        resp = await hctx.client.call_active(req, timeout_s=10, version=7,
                                               error_of=lambda r: _first_error(ApiKey.CREATE_TOPICS, r))
    except ControllerUnavailable:
        return
    await _await_metadata(hctx, ApiKey.CREATE_TOPICS, req, resp)
