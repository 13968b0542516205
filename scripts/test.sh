#!/usr/bin/env bash
# Installs Raftka with its test dependencies and runs the default test suite (~12 min on 2 cores).
# Long soaks: RAFTKA_SOAK=1 bash scripts/test.sh
# Three pytest-xdist workers, each test module on one worker (`loadscope`: a module's live cluster
# fixture starts once). A serial run spends ~70 % of its wall time with the CPU idle, waiting on
# live clusters (session timeouts, elections, fences), so three at once fit two cores: 11 min
# against 28 serially on a quiet machine. Tests share the machine safely: each worker picks
# ports from a slice of its own (partition_server/testing.py port_range), nodes with their own
# loopback addresses get a random 127.a.b prefix, and nftables tables are named per cluster.
# `--timeout`: a test hung past 15 minutes fails alone, with every thread's stack.
# Serially: bash scripts/test.sh -n 0
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
# kafka-python 2.0.2 cannot share an environment with 3.x: the interop tests run it from here.
if [ ! -x .venv/kafka-python-2/bin/python ]; then
  python3 -m venv .venv/kafka-python-2
  .venv/kafka-python-2/bin/pip install --quiet --disable-pip-version-check \
    kafka-python==2.0.2 python-snappy lz4 zstandard
fi
python3 -m pytest -q -n 3 --dist loadscope --timeout 900 "$@"
