"""The blocking facades in one import, for scripts and Spark executors:

    from clients.sync import SyncProducer, SyncAdmin
    with SyncProducer("127.0.0.1:9092", {"acks": "all"}) as p:
        fut = p.send("events", b"value", key=b"k")     # SendFuture (Future-like handle)
        p.flush()
        print(fut.result())                            # RecordMetadata
    with SyncAdmin("127.0.0.1:9092") as admin:
        print(admin.list_topics())

Kept as a public path (users import the facades from here); each lives with its client:
clients/producer/sync.py, clients/consumer/sync.py, clients/admin/sync.py. The shared loop
thread and why it is one long-lived loop: clients/loop_thread.py.
"""

from __future__ import annotations

from clients.admin.sync import SyncAdmin
from clients.consumer.sync import SyncConsumer
from clients.loop_thread import LoopThread
from clients.producer.sync import SendFuture, SyncProducer

__all__ = ["LoopThread", "SendFuture", "SyncAdmin", "SyncConsumer", "SyncProducer"]
