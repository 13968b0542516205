"""A topic config change reaches logs that are already open (Kafka's LogManager.
updateTopicConfig): before, an open log kept the config it was opened with until the broker
restarted, so an AlterConfigs of retention.ms or cleanup.policy did nothing meanwhile."""

from partition_server.log import PartitionLog
from partition_server.log.config import LogConfig
from partition_server.replica_manager import ReplicaManager


def _apply(rm, cfg):
    rm.apply_partition("t", None, 0, [0, 1], [0, 1], 0, 1, 1, cfg, 1, 0)


def test_an_open_log_takes_the_new_topic_config_and_the_indexes_follow(tmp_path):
    opened = []

    def open_log(t, p, cfg):
        opened.append(cfg)
        return PartitionLog(str(tmp_path / f"{t}-{p}"), LogConfig.from_kafka(cfg))
    rm = ReplicaManager(0, open_log)
    _apply(rm, {"retention.ms": "1000"})
    log = rm.get("t", 0).log
    assert log.config.retention_ms == 1000 and ("t", 0) not in rm.compacted
    _apply(rm, {"retention.ms": "5", "cleanup.policy": "compact", "flush.ms": "100"})
    assert rm.get("t", 0).log is log and len(opened) == 1          # the same open log
    assert log.config.retention_ms == 5 and "compact" in log.config.cleanup_policy
    assert ("t", 0) in rm.compacted and ("t", 0) in rm.timed_flush
    _apply(rm, {})                                                  # back to the defaults
    assert log.config == LogConfig() and ("t", 0) not in rm.compacted
    assert ("t", 0) not in rm.timed_flush
    _apply(rm, {"retention.ms": "not-a-number"})                    # kept, never raised
    assert log.config == LogConfig()


def test_one_config_is_parsed_once_and_a_mutated_dict_is_read_again(tmp_path):
    """The config is parsed once per distinct content (30,000 leaderships applied at once spent
    over half their time parsing it), never served stale for a dict whose content changed."""
    rm = ReplicaManager(0, lambda t, p, cfg: PartitionLog(str(tmp_path / f"{t}-{p}"),
                                                          LogConfig.from_kafka(cfg)))
    cfg = {"retention.ms": "1000"}
    assert rm._log_config(dict(cfg)) is rm._log_config(dict(cfg))
    rm.apply_partition("t", None, 0, [0, 1], [0, 1], 0, 1, 1, cfg, 1, 0)
    cfg["retention.ms"] = "7"           # the same dict object, changed
    rm.apply_partition("t", None, 0, [0, 1], [0, 1], 0, 1, 1, cfg, 1, 0)
    assert rm.get("t", 0).log.config.retention_ms == 7
