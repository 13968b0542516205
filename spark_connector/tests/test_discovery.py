"""format("raftka") with no `register()`: PySpark discovers the installed `pyspark_raftka` module.

Raftka is installed the way a user does it (`pip install -e .` into a fresh virtualenv, and a wheel
built by `pip wheel`), and nothing else puts the repository on the path: the Spark runs start in
a scratch folder with no PYTHONPATH, through a fresh interpreter and through `spark-submit`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from partition_server.testing import LiveCluster  # noqa: E402
from spark_connector import kafka_io  # noqa: E402
from spark_connector.tests.live_helpers import create_topic  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# Lists the `pyspark_*` modules exactly as pyspark.sql.worker.lookup_data_sources does.
LIST_DISCOVERED = r"""
import pkgutil, importlib
for info in pkgutil.iter_modules():
    if info.name.startswith("pyspark_"):
        mod = importlib.import_module(info.name)
        print(info.name, mod.DefaultSource.name(), mod.__file__)
"""


def _clean_env(**extra) -> dict[str, str]:
    """This interpreter's environment minus whatever could put the repository on the path."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "SPARK_HOME", "PYSPARK_SUBMIT_ARGS")}
    env.update(extra)
    return env


def _venv(where: Path) -> Path:
    """A virtualenv that sees this interpreter's packages (pyspark, pyarrow...) but not Raftka
    unless installed into it: its own site-packages come first."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(where)],
                   check=True, timeout=120)
    return where / "bin" / "python"


def _pip(python: Path, *args: str, cwd: Path) -> None:
    out = subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", "-q", *args],
                         cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]


def _discovered(python: Path, cwd: Path) -> list[list[str]]:
    out = subprocess.run([str(python), "-c", LIST_DISCOVERED], cwd=cwd, env=_clean_env(),
                         capture_output=True, text=True, timeout=120, check=True)
    return [line.split(" ", 2) for line in out.stdout.splitlines()]


@pytest.fixture(scope="module")
def editable_python(tmp_path_factory) -> Path:
    """The interpreter of a virtualenv where Raftka is installed with `pip install -e .`."""
    python = _venv(tmp_path_factory.mktemp("venv-editable") / "venv")
    _pip(python, "install", "--no-deps", "-e", str(ROOT), cwd=ROOT)
    return python


def test_editable_install_is_discovered_by_pyspark_lookup(editable_python, tmp_path):
    # setuptools' default editable finder (an import hook) hides modules from iter_modules();
    # pyproject.toml's package-dir makes it a path entry instead
    found = _discovered(editable_python, tmp_path)
    assert [f[:2] for f in found] == [["pyspark_raftka", "raftka"]], found
    assert Path(found[0][2]) == ROOT / "pyspark_raftka.py"


def test_wheel_ships_pyspark_raftka(tmp_path):
    python = _venv(tmp_path / "venv")
    _pip(python, "wheel", "--no-deps", "-w", str(tmp_path / "dist"), str(ROOT), cwd=tmp_path)
    wheel = next((tmp_path / "dist").glob("raftka-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "pyspark_raftka.py" in names and "spark_connector/source.py" in names
    _pip(python, "install", "--no-deps", str(wheel), cwd=tmp_path)
    found = _discovered(python, tmp_path)
    assert [f[:2] for f in found] == [["pyspark_raftka", "raftka"]], found
    assert "site-packages" in found[0][2], found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("discovery-cluster"), brokers=1)
    c.start(timeout_s=120)
    yield c
    kafka_io.close_all()
    c.stop()


# A user's script: no register(), no Raftka import. write, read, readStream -> writeStream.
USER_SCRIPT = r"""
import sys
from pyspark.sql import SparkSession
bootstrap, topic, work = sys.argv[1], sys.argv[2], sys.argv[3]
spark = (SparkSession.builder.appName("raftka-discovery")
         .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.python.authenticate.socketTimeout", "120s").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
kafka = {"kafka.bootstrap.servers": bootstrap}
rows = [(b"k%d" % i, b"v%d" % i) for i in range(20)]
(spark.createDataFrame(rows, "key binary, value binary").write.format("raftka").mode("append")
 .options(**kafka).option("topic", topic).save())
def count(t):
    return spark.read.format("raftka").options(**kafka).option("subscribe", t).load().count()
print("READ", count(topic))
q = (spark.readStream.format("raftka").options(**kafka).option("subscribe", topic)
     .option("startingOffsets", "earliest").load().select("key", "value")
     .writeStream.format("raftka").options(**kafka).option("topic", topic + "-copy")
     .option("checkpointLocation", work + "/ck").trigger(availableNow=True).start())
q.awaitTermination(300)
print("COPIED", count(topic + "-copy"))
print("DRIVER_IMPORTED_CONNECTOR", "spark_connector" in sys.modules)
spark.stop()
"""


@pytest.mark.live
@pytest.mark.spark
@pytest.mark.parametrize("launcher", ["python", "spark-submit"])
def test_fresh_session_uses_format_raftka_without_register(cluster, editable_python, tmp_path,
                                                            launcher):
    topic = f"discovered-{launcher}"
    for t in (topic, topic + "-copy"):
        create_topic(cluster.bootstrap, t, 2)
    script = tmp_path / "user_job.py"
    script.write_text(USER_SCRIPT)
    args = [cluster.bootstrap, topic, str(tmp_path)]
    python = str(editable_python)
    env = _clean_env(PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python,
                     SPARK_LOCAL_IP="127.0.0.1", SPARK_AUTH_SOCKET_TIMEOUT="120")
    if launcher == "python":
        env["PYSPARK_SUBMIT_ARGS"] = "--master local[1] pyspark-shell"
        cmd = [python, str(script), *args]
    else:
        from pyspark.find_spark_home import _find_spark_home
        submit = Path(_find_spark_home()) / "bin" / "spark-submit"
        cmd = [str(submit), "--master", "local[1]", str(script), *args]
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert lines["READ"] == "20" and lines["COPIED"] == "20", out.stdout
    assert lines["DRIVER_IMPORTED_CONNECTOR"] == "False"
