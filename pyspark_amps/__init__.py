"""Automatic registration of the ``amps`` PySpark data source.

Spark imports every top-level ``pyspark_*`` module it finds on the Python workers' path and
registers its ``DefaultSource`` (SPARK-45917), so ``spark.read.format("amps")`` works without
``ampsclient.spark.register(spark)`` once ``ampsclient[spark]`` is installed.
"""

from __future__ import annotations

try:
    from ampsclient.spark import AMPSDataSource as DefaultSource
except ImportError:  # pragma: no cover - pyspark or pyarrow missing: register nothing
    pass
else:
    __all__ = ["DefaultSource"]
