#!/usr/bin/env bash
# Installs Raftka with its test dependencies and runs the default test suite (< ~20 min).
# Long soaks: RAFTKA_SOAK=1 bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
python3 -m pytest -q "$@"
