"""The committed generated code matches what the generator writes from the schemas today."""

import subprocess
import sys
from pathlib import Path

from wire.codegen.generator import strip_comments

REPO = Path(__file__).resolve().parents[2]


def test_committed_output_is_current():
    proc = subprocess.run([sys.executable, "-m", "wire.codegen", "--check"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_strip_comments_keeps_slashes_inside_strings():
    text = '{"about": "see http://x // not a comment"} // a comment\n// whole line\n{"a": 1}'
    assert strip_comments(text) == '{"about": "see http://x // not a comment"} \n\n{"a": 1}'


def test_api_key_enum_names_every_request_by_kafkas_name():
    from wire.messages.api_keys import ApiKey, api_name
    from wire.messages.index_generated import REQUESTS
    assert sorted(ApiKey) == sorted(REQUESTS)
    assert ApiKey.PRODUCE == 0 and ApiKey.API_VERSIONS == 18 and ApiKey.BROKER_HEARTBEAT == 63
    assert api_name(ApiKey.OFFSET_FOR_LEADER_EPOCH) == "OffsetForLeaderEpoch"
    for key in ApiKey:
        assert REQUESTS[key].API_KEY == key
