"""common/clock.py: the steady clock ignores wall-clock jumps; the test seam jumps the
wall clock (checked in a child process: the seam patches time.time process-wide)."""

import subprocess
import sys

CHILD = r"""
import sys, time
from common import clock
path = sys.argv[1]
open(path, "w").write("0")
clock.install_offset_file(path, poll_s=0.01)
w0, s0 = clock.wall_ms(), clock.steady_ms()
open(path, "w").write("-3600")
time.sleep(0.2)
w1, s1 = clock.wall_ms(), clock.steady_ms()
print(w1 - w0, s1 - s0)
"""


def test_wall_jumps_steady_does_not(tmp_path):
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "offset")],
                         capture_output=True, text=True, timeout=60, check=True).stdout.split()
    wall_delta, steady_delta = int(out[0]), int(out[1])
    assert -3_600_000 < wall_delta < -3_599_000          # the wall clock went an hour back
    assert 150 <= steady_delta < 2000                    # the steady one kept going forward

