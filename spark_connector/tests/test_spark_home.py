"""The fast-start SPARK_HOME: pip's Spark minus python/ (its bytecode-less pyspark.zip)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_connector.spark_home import make_spark_home, pip_spark_home, use_compiled_pyspark


def test_shim_has_everything_but_python(tmp_path):
    source = pip_spark_home()
    home = make_spark_home(tmp_path / "sh")
    names = {p.name for p in home.iterdir()}
    assert names == {p.name for p in source.iterdir()} - {"python"}
    assert (home / "jars").resolve() == (source / "jars").resolve()
    assert any((home / "jars").iterdir())                  # Spark's jars reachable through it
    assert make_spark_home(tmp_path / "sh") == home         # again: kept as it is


def test_not_a_spark_home_is_refused(tmp_path):
    with pytest.raises(ValueError, match="not a Spark home"):
        make_spark_home(tmp_path / "sh", source=tmp_path)


def test_use_keeps_an_operators_spark_home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_HOME", "/opt/their-spark")
    assert use_compiled_pyspark(tmp_path) is None
    assert os.environ["SPARK_HOME"] == "/opt/their-spark"
    monkeypatch.delenv("SPARK_HOME")
    home = use_compiled_pyspark(tmp_path)
    assert os.environ["SPARK_HOME"] == str(home) and (home / "jars").is_dir()


def test_default_place_is_the_users_cache_not_a_shared_temp_dir(tmp_path, monkeypatch):
    import pyspark
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    home = use_compiled_pyspark()
    assert home == tmp_path / "cache" / "raftka" / f"spark-home-{pyspark.__version__}"


def test_spark_submit_runs_from_the_shim(tmp_path):
    """Spark itself starts from the shim: spark-submit --version through its bin/."""
    home = make_spark_home(tmp_path / "sh")
    env = dict(os.environ, SPARK_HOME=str(home))
    out = subprocess.run([str(home / "bin" / "spark-submit"), "--version"], env=env,
                         capture_output=True, text=True, timeout=120)
    import pyspark
    assert out.returncode == 0, out.stderr[-2000:]
    assert pyspark.__version__ in out.stdout + out.stderr


def test_cli_prints_the_export_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "spark_connector.spark_home", str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"export SPARK_HOME={tmp_path / 'x'}"
    bad = subprocess.run([sys.executable, "-m", "spark_connector.spark_home"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "usage" in bad.stderr
