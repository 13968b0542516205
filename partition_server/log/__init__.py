"""Durable segmented partition logs: see partition_log.py and README.md."""

from partition_server.log.config import LogConfig  # noqa: F401
from partition_server.log.partition_log import AppendInfo, FetchDataInfo, PartitionLog  # noqa: F401
from partition_server.log.segment import FileRange  # noqa: F401
from partition_server.log.cleaner import LogCleaner  # noqa: F401,E402
