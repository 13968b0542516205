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
