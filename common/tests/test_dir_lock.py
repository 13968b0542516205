"""common/dir_lock.py: a directory locked by one holder cannot be locked by another until the
first is gone, however it goes; a forked child does not keep its parent's lock."""

import os
import subprocess
import sys
import textwrap

import pytest

from common import dir_lock

HOLD = textwrap.dedent("""
    import os, sys, time
    from common import dir_lock
    dir_lock.lock_dirs(sys.argv[1:], "broker")
    if os.environ.get("FORK_CHILD"):
        if os.fork() == 0:              # a child that outlives its parent, as a snapshot writer
            os.write(1, b"child\\n")    # one write each: the lines cannot interleave
            time.sleep(60)
            os._exit(0)
    os.write(1, b"held\\n")
    time.sleep(60)
""")


def _holder(paths, **env):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, *map(str, paths)],
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.getcwd(), **env})
    expected = {"held", "child"} if env.get("FORK_CHILD") else {"held"}
    assert {proc.stdout.readline().strip() for _ in expected} == expected
    return proc


def test_a_held_directory_is_refused_until_its_holder_dies(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    holder = _holder([b])
    try:
        with pytest.raises(dir_lock.DirectoryInUse, match=r"\.lock in .*/b\. A broker"):
            dir_lock.lock_dirs([a, b], "broker")
    finally:
        holder.kill()
        holder.wait()
    fds = dir_lock.lock_dirs([a, b], "broker")       # the kernel released it with the process
    assert len(fds) == 2
    dir_lock.release(fds)


def test_a_forked_child_that_outlives_its_parent_does_not_hold_the_directory(tmp_path):
    holder = _holder([tmp_path], FORK_CHILD="1")
    holder.kill()
    holder.wait()
    try:
        fds = dir_lock.lock_dirs([tmp_path], "controller")
    finally:
        subprocess.run(["pkill", "-f", f"{tmp_path}"], check=False)
    dir_lock.release(fds)
