"""Process CPU, memory and open files from /proc/self (Linux), as Prometheus families with the
names the Prometheus client libraries use (process_cpu_seconds_total, …), on every node."""

from __future__ import annotations

import os

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def process_families() -> list[tuple[str, str, str, list]]:
    """[(name, kind, help, [(labels, value)])]; empty where /proc is missing."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read().rsplit(")", 1)[1].split()
        with open("/proc/self/statm") as f:
            statm = f.read().split()
        fds = len(os.listdir("/proc/self/fd"))
    except OSError:
        return []
    # fields after the command: [11] utime, [12] stime (clock ticks), [20] vsize (bytes)
    cpu = (int(stat[11]) + int(stat[12])) / CLK_TCK
    return [
        ("process_cpu_seconds_total", "counter", "User and system CPU time of this process.",
         [("", f"{cpu:.2f}")]),
        ("process_resident_memory_bytes", "gauge", "Resident set size.",
         [("", int(statm[1]) * PAGE)]),
        ("process_virtual_memory_bytes", "gauge", "Virtual memory size.", [("", int(stat[20]))]),
        ("process_open_fds", "gauge", "Open file descriptors.", [("", fds)]),
    ]
