"""``ampsclient.spark``: a PySpark data source (format ``amps``) for AMPS topics.

Batch and streaming reads replay the server's transaction log through bookmark ranges; writes
publish through an :class:`~ampsclient.HAClient` with sequence numbers derived from the Spark
task, so retried tasks and replayed micro-batches are de-duplicated by the server::

    from ampsclient.spark import register

    register(spark)                      # not needed when the package is installed (auto)
    df = (spark.read.format("amps")
          .option("uri", "tcp://127.0.0.1:9007/amps/json")
          .option("topic", "orders")
          .option("bookmark", "[20260101T000000Z:20260102T000000Z)")
          .load())

This package needs the ``spark`` extra (``pip install 'ampsclient[spark]'``: pyspark and
pyarrow); nothing else in ``ampsclient`` imports it. See ``docs/spark.md``.
"""

from __future__ import annotations

from typing import Any

from ._convert import default_schema
from ._core import (
    DEFAULT_FENCE_TOPIC,
    METADATA_COLUMNS,
    AMPSDataLossError,
    AMPSSparkError,
    AMPSUnavailableError,
)
from .datasource import (
    AMPSBatchReader,
    AMPSBatchWriter,
    AMPSCommitMessage,
    AMPSDataSource,
    AMPSStreamReader,
    AMPSStreamWriter,
)

__all__ = [
    "DEFAULT_FENCE_TOPIC",
    "METADATA_COLUMNS",
    "AMPSBatchReader",
    "AMPSBatchWriter",
    "AMPSCommitMessage",
    "AMPSDataLossError",
    "AMPSDataSource",
    "AMPSSparkError",
    "AMPSStreamReader",
    "AMPSStreamWriter",
    "AMPSUnavailableError",
    "default_schema",
    "register",
]


def register(spark: Any) -> None:
    """Register the ``amps`` format with a SparkSession (idempotent).

    Installing ``ampsclient`` also installs the ``pyspark_amps`` module, which Spark discovers
    on its own (any ``pyspark_*`` module exposing ``DefaultSource``); calling this is needed
    only when ``ampsclient`` is not installed in the workers' site-packages (e.g. an editable
    install) or to be explicit.
    """
    spark.dataSource.register(AMPSDataSource)
