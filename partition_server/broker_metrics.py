"""More of a broker's `/metrics` (rendered by metrics.py): traffic per topic, coordinator
gauges, log flushes, segments and disk. Each family with its Kafka counterpart:

- raftka_topic_bytes_in_total / _messages_in_total / _bytes_out_total {topic}: BytesInPerSec,
  MessagesInPerSec and BytesOutPerSec as counters (take `rate()`): bytes appended as leader
  (producers and the coordinators' own writes), records appended, bytes read by consumers
  (follower fetches are replication, not BytesOut, as in Kafka). A deleted topic's counters
  are dropped when its partitions leave the broker (`forget_deleted_topics`; Kafka removes a
  deleted topic's metrics), and any left at a scrape;
- raftka_group_coordinator_groups {type,state}: groups coordinated here by state (Kafka's
  NumGroups{Stable,Empty,…}); members per group are raftka_consumer_group_members (metrics.py);
- raftka_transaction_coordinator_transactions {state}: transactional ids coordinated here by
  state (Ongoing, PrepareCommit, …);
- raftka_log_flush_time_ms: fsyncs of segment data (LogFlushRateAndTimeMs);
- raftka_log_segments, raftka_log_size_bytes: segments and bytes of the logs hosted here
  (NumLogSegments and Size, summed; a walk over the hosted logs per scrape);
- raftka_log_dir_total_bytes / _free_bytes: the log directory's file system (statvfs), for
  disk alerts."""

from __future__ import annotations

import os

from common.prometheus import labels
from partition_server.log.segment import FLUSHES


def forget_deleted_topics(topic_traffic: dict, removed, old, new) -> None:
    """Drop the counters of topics deleted between images `old` and `new` (`removed`: the
    partitions gone, image_delta.py), a topic deleted and created again included: its new
    counters start at 0. Pruned only at a scrape, a broker nobody scraped kept one entry per
    topic it ever served, for as long as it ran under topic churn."""
    if not topic_traffic:
        return
    for name in {name for name, _ in removed}:
        t = new.topics.get(name)
        if name in topic_traffic and (t is None or t.topic_id != old.topics[name].topic_id):
            del topic_traffic[name]


def traffic_families(topic_traffic: dict, image) -> list:
    if image is not None:
        for gone in [t for t in topic_traffic if t not in image.topics]:
            del topic_traffic[gone]
    rows = sorted(topic_traffic.items())
    return [
        ("raftka_topic_bytes_in_total", "counter",
         "Bytes appended to partitions led here, per topic (BytesInPerSec).",
         [(labels(topic=t), v[0]) for t, v in rows]),
        ("raftka_topic_messages_in_total", "counter",
         "Records appended to partitions led here, per topic (MessagesInPerSec).",
         [(labels(topic=t), v[1]) for t, v in rows]),
        ("raftka_topic_bytes_out_total", "counter",
         "Bytes read by consumers from partitions led here, per topic (BytesOutPerSec).",
         [(labels(topic=t), v[2]) for t, v in rows]),
    ]


def coordinator_families(groups, txns, txn_loads=None) -> list:
    counts: dict[tuple[str, str], int] = {}
    for g in groups.state.groups.values():
        key = ("classic", g.state.value)
        counts[key] = counts.get(key, 0) + 1
    for g in groups.consumer.groups.values():
        key = ("consumer", str(g.state))
        counts[key] = counts.get(key, 0) + 1
    fams = [("raftka_group_coordinator_groups", "gauge",
             "Consumer groups coordinated here, per protocol type and state (NumGroups…).",
             [(labels(type=t, state=s), n) for (t, s), n in sorted(counts.items())])]
    if txns is not None:
        states: dict[str, int] = {}
        for meta in txns.values():
            state = meta.state.value
            states[state] = states.get(state, 0) + 1
        fams.append(("raftka_transaction_coordinator_transactions", "gauge",
                     "Transactional ids coordinated here, per transaction state.",
                     [(labels(state=s), n) for s, n in sorted(states.items())]))
    loading = [("group", getattr(groups, "loads", None)), ("transaction", txn_loads)]
    fams.append(("raftka_coordinator_partitions_loading", "gauge",
                 "Coordinator partitions being replayed here, answering "
                 "COORDINATOR_LOAD_IN_PROGRESS meanwhile (coordinator_load.py).",
                 [(labels(coordinator=c), len(loads.running)) for c, loads in loading
                  if loads is not None]))
    return fams


def log_families(replicas, log_dir: str | list | None) -> list:
    segments = size = 0
    for key in replicas.hosted_keys():
        hosted = replicas.get(*key)
        if hosted is not None and not hosted.offline:
            segs = hosted.log.segments
            segments += len(segs)
            size += sum(s.size for s in segs)
    fams = [
        ("raftka_log_flush_time_ms", "histogram",
         "fsyncs of segment data, in ms (LogFlushRateAndTimeMs).", FLUSHES.samples()),
        ("raftka_log_segments", "gauge", "Segments of the logs hosted here (NumLogSegments).",
         [("", segments)]),
        ("raftka_log_size_bytes", "gauge", "Bytes of the logs hosted here (Size).",
         [("", size)]),
    ]
    # every log directory (JBOD: `log_dir` may list several), plus Kafka's OfflineLogDirectoryCount
    dirs = [log_dir] if isinstance(log_dir, str) else list(log_dir or ())
    total, free = [], []
    for d in dirs:
        try:
            st = os.statvfs(d)
        except OSError:
            continue
        total.append((labels(dir=d), st.f_blocks * st.f_frsize))
        free.append((labels(dir=d), st.f_bavail * st.f_frsize))
    if total:
        fams += [
            ("raftka_log_dir_total_bytes", "gauge", "Size of the log directory's file system.",
             total),
            ("raftka_log_dir_free_bytes", "gauge",
             "Bytes available to the broker on the log directory's file system.", free),
        ]
    log_dirs = getattr(replicas, "log_dirs", None)
    if log_dirs is not None:
        fams.append(("raftka_offline_log_directory_count", "gauge",
                     "Log directories offline after an I/O error (OfflineLogDirectoryCount).",
                     [("", len(log_dirs.dirs) - len(log_dirs.online()))]))
    return fams
