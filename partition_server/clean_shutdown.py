"""Did this broker's logs survive its last stop intact? (KIP-966 unclean-shutdown detection)

The controller must not trust a replica that may have lost records it acknowledged as the last
in-sync copy of a partition. The broker registers with `PreviousBrokerEpoch`: the epoch under
which its logs were last known intact, or -1. Intact means either

- a clean shutdown: every log closed and flushed, then `<log dir>/.broker-clean-shutdown`
  written with the broker epoch (read and removed, durably, at the next start); or
- a process crash (SIGKILL, OOM kill, a bug) without an operating-system restart: the page cache
  outlives the process, so nothing written before the crash is lost. The broker records the
  kernel's boot id with its epoch at every registration (`.broker-session`); the same boot id
  at the next start means no reboot happened in between.

Anything else — a power loss, a kernel crash, a reboot — may have dropped the unflushed tail of
every log, and the broker sends -1 (metadata_quorum/controller/replication_control.py).
`raftka.boot.id.file` points the boot-id read elsewhere; tests use it to simulate a reboot.
"""

from __future__ import annotations

import logging
import os

from partition_server.log.fsync import fsync_dir

log = logging.getLogger(__name__)

CLEAN_FILE = ".broker-clean-shutdown"
SESSION_FILE = ".broker-session"
BOOT_ID = "/proc/sys/kernel/random/boot_id"



def _write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def boot_id(path: str | None = None) -> str | None:
    return _read(path or BOOT_ID) or None


def previous_epoch(log_dir: str, boot_id_file: str | None = None) -> int:
    """At start: the epoch under which our logs are known intact, -1 if they may not be. The
    clean-shutdown record is consumed, so a crash from now on is not mistaken for a clean stop."""
    clean_path = os.path.join(log_dir, CLEAN_FILE)
    clean = _read(clean_path)
    if clean is not None:
        try:
            os.unlink(clean_path)
            fsync_dir(log_dir)
        except OSError as exc:
            log.warning("cannot remove %s: %s", clean_path, exc)
            return -1      # it could survive a crash and vouch for logs it never saw closed
        try:
            return int(clean)
        except ValueError:
            return -1
    session_text = _read(os.path.join(log_dir, SESSION_FILE))
    if session_text is None and _is_new(log_dir):
        # never registered and holding no partition: there was no shutdown, clean or not, and
        # nothing to lose (-1 is also what a new broker sends in Kafka)
        log.info("new log directory %s: no previous broker epoch", log_dir)
        return -1
    session = (session_text or "").split()
    now = boot_id(boot_id_file)
    if len(session) == 2 and now is not None and session[0] == now:
        # an operator wants to know that the broker died, even though nothing was lost
        log.warning("the last stop was not clean (no clean-shutdown record), but there was no "
                    "reboot since (boot id %s): nothing written before it is lost", now)
        try:
            return int(session[1])
        except ValueError:
            return -1
    log.warning("unclean shutdown with a reboot (or no record of one): "
                "telling the controller our logs may have lost unflushed records")
    return -1


def _is_new(log_dir: str) -> bool:
    """No partition log here: each one is a directory (`<topic>-<partition>`), so a log dir
    without any subdirectory holds no record that an unclean stop could have cost."""
    try:
        with os.scandir(log_dir) as entries:
            return not any(e.is_dir(follow_symlinks=False) for e in entries)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def registered(log_dir: str, broker_epoch: int, boot_id_file: str | None = None) -> None:
    """After each registration: remember the epoch with the current boot id."""
    now = boot_id(boot_id_file)
    if now is None or broker_epoch < 0:
        return
    try:
        _write(os.path.join(log_dir, SESSION_FILE), f"{now} {broker_epoch}")
    except OSError as exc:
        log.warning("cannot record the broker session: %s", exc)


def record_clean(log_dir: str, broker_epoch: int) -> None:
    """Every log is closed and flushed: vouch for them under `broker_epoch`."""
    if broker_epoch >= 0:
        _write(os.path.join(log_dir, CLEAN_FILE), str(broker_epoch))
