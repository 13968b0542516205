"""KIP-966 unclean-shutdown detection on the broker (partition_server/clean_shutdown.py)."""

import os

from partition_server import clean_shutdown as cs


def test_clean_stop_same_boot_and_reboot(tmp_path):
    boot = tmp_path / "boot"
    boot.write_text("boot-1")
    d = str(tmp_path / "logs")
    os.makedirs(d)
    assert cs.previous_epoch(d, str(boot)) == -1              # first start: nothing known
    cs.registered(d, 17, str(boot))
    # a process crash without a reboot: the page cache kept every write
    assert cs.previous_epoch(d, str(boot)) == 17
    # a clean stop vouches for the logs, once
    cs.record_clean(d, 18)
    assert cs.previous_epoch(d, str(boot)) == 18
    assert not os.path.exists(os.path.join(d, cs.CLEAN_FILE))
    # a reboot (power loss) since the last registration: not to be trusted
    cs.registered(d, 19, str(boot))
    boot.write_text("boot-2")
    assert cs.previous_epoch(d, str(boot)) == -1
    # no readable boot id at all: not trusted either
    assert cs.previous_epoch(d, str(tmp_path / "missing")) == -1


def test_garbage_records_are_not_trusted(tmp_path):
    d = str(tmp_path)
    (tmp_path / cs.CLEAN_FILE).write_text("not-a-number")
    assert cs.previous_epoch(d, None) == -1
    (tmp_path / cs.SESSION_FILE).write_text("only-one-field")
    assert cs.previous_epoch(d, None) == -1


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == cs.__name__ and r.levelname == "WARNING"]


def test_a_new_log_dir_starts_without_a_warning_and_a_crash_warns(tmp_path, caplog):
    boot = tmp_path / "boot"
    boot.write_text("boot-1")
    d = tmp_path / "logs"
    caplog.set_level("INFO", logger=cs.__name__)
    assert cs.previous_epoch(str(d), str(boot)) == -1          # not even created yet
    d.mkdir()
    (d / "replication-offset-checkpoint").write_text("0\n0\n")  # files only: no partition log
    assert cs.previous_epoch(str(d), str(boot)) == -1
    assert _warnings(caplog) == []
    # registered, then killed (no clean-shutdown record), same boot: warned, but trusted
    cs.registered(str(d), 5, str(boot))
    assert cs.previous_epoch(str(d), str(boot)) == 5
    assert len(_warnings(caplog)) == 1 and "not clean" in _warnings(caplog)[0]
    # partition logs but no record of any session (say, the session file was lost): warned
    caplog.clear()
    os.unlink(d / cs.SESSION_FILE)
    (d / "orders-0").mkdir()
    assert cs.previous_epoch(str(d), str(boot)) == -1
    assert any("lost unflushed records" in m for m in _warnings(caplog))
    # a reboot since the last registration: warned
    caplog.clear()
    cs.registered(str(d), 6, str(boot))
    boot.write_text("boot-2")
    assert cs.previous_epoch(str(d), str(boot)) == -1
    assert any("lost unflushed records" in m for m in _warnings(caplog))
    # a clean stop: no warning
    caplog.clear()
    cs.record_clean(str(d), 7)
    assert cs.previous_epoch(str(d), str(boot)) == 7
    assert _warnings(caplog) == []
