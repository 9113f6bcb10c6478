"""Spark tests: ONE local SparkSession (``local[2,2]``: two cores, a failed task is retried
once) and ONE reference server subprocess for the whole run; each test uses its own topics.

The modules skip themselves when pyspark/pyarrow are missing (``pytest.importorskip``), and
the ``spark`` fixture skips when there is no Java runtime.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from ampsclient_server_stub.harness import ServerProcess

ROOT = pathlib.Path(__file__).resolve().parents[2]

JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""The local session's JVM (driver and executors in one): the quick compiler only and one GC
thread. The tests' jobs are short, so the optimising compiler's threads (and a parallel GC's)
cost the two cores more than their code gains back."""


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The session's SparkSession, with the ``amps`` format registered."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime for Spark")
    # the workers must run this interpreter (it has pyarrow and ampsclient); set before start
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), path) if p)
    from pyspark.sql import SparkSession

    from ampsclient.spark import register

    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("ampsclient-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def amps_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A reference server subprocess (Spark's Python workers are other processes too)."""
    server = ServerProcess(data_dir=tmp_path_factory.mktemp("amps"), name="spark-tests")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def uri(amps_server: ServerProcess) -> str:
    """The JSON TCP URI of the session's server."""
    return amps_server.uri()


@pytest.fixture
def topic() -> str:
    """A topic of this test's own."""
    return f"spark-test-{uuid.uuid4().hex[:10]}"
