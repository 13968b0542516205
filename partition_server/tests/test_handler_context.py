"""Handlers get a typed HandlerContext, not the whole broker (ARCHITECTURE.md)."""

import dataclasses
import re
import types
from pathlib import Path

from partition_server.handlers.context import HandlerContext

HANDLERS = Path(__file__).resolve().parents[1] / "handlers"


def _fake_broker(**kw):
    fields = dict(broker_id=1, config={}, replicas="R", purgatory="P", groups="G", txn="T",
                  fetch_sessions="F", producer_ids="I", client="C", replication_quotas="Q",
                  image="image-1",
                  authorizer=None, topic_config=lambda topic: {"topic": topic})
    fields.update(kw)
    return types.SimpleNamespace(**fields)


def test_the_context_follows_what_changes_under_the_broker():
    broker = _fake_broker()
    hctx = HandlerContext.of(broker)
    assert (hctx.replicas, hctx.groups, hctx.broker_id) == ("R", "G", 1)
    broker.image, broker.authorizer = "image-2", "authorizer"
    assert hctx.image == "image-2" and hctx.authorizer == "authorizer"
    assert hctx.topic_config("t") == {"topic": "t"}
    assert hctx.client_quotas is None
    hctx.client_quotas = "qm"                  # created on first use, shared with metrics
    assert broker.client_quotas == "qm" and hctx.client_quotas == "qm"


def test_handlers_touch_only_what_the_context_offers():
    offered = {f.name for f in dataclasses.fields(HandlerContext) if not f.name.startswith("_")}
    offered |= {n for n, v in vars(HandlerContext).items()
                if isinstance(v, property) or (callable(v) and not n.startswith("_"))}
    used = set()
    for path in HANDLERS.glob("*.py"):
        if path.name == "context.py":
            continue
        text = path.read_text()
        # `broker.x` attribute use, not a config key in quotes ("broker.id")
        assert not re.search(r"(?<![\"'])\bbroker\.[a-z_]", text), path.name
        used |= set(re.findall(r"\bhctx\.([a-z_]+)", text))
    assert used and used <= offered, used - offered
