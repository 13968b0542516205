#!/usr/bin/env bash
# Installs Raftka with its test dependencies and runs the default test suite (~35 min on 2 cores).
# Long soaks: RAFTKA_SOAK=1 bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
# kafka-python 2.0.2 cannot share an environment with 3.x: the interop tests run it from here.
if [ ! -x .venv/kafka-python-2/bin/python ]; then
  python3 -m venv .venv/kafka-python-2
  .venv/kafka-python-2/bin/pip install --quiet --disable-pip-version-check \
    kafka-python==2.0.2 python-snappy lz4 zstandard
fi
python3 -m pytest -q "$@"
