"""A data pipeline on Spark over AMPS: replay a day of orders, aggregate, keep a SOW up to date.

1. starts a reference server subprocess with a SOW topic ``/spark/positions`` keyed by
   ``/symbol`` (unless ``--uri`` names a server that has one);
2. publishes a day of synthetic orders to ``orders`` (the server stamps each with its receive
   time, so "the day" is today, UTC);
3. replays the day with ``spark.read.format("amps")`` (a time range, 2 partitions, JSON
   payloads parsed into columns) and aggregates positions by symbol;
4. writes the positions to the SOW topic with ``df.write.format("amps")`` (idempotent: a
   re-run with the same ``writeId`` publishes nothing twice);
5. runs a streaming query (``spark.readStream.format("amps")`` -> aggregate -> ``foreachBatch``
   writing each micro-batch's changed rows with the ``amps`` writer) that keeps the SOW up to
   date while more orders arrive, for a few micro-batches, printing the SOW after each.

Run: ``python examples/spark_pipeline.py`` (needs ``pip install 'ampsclient[spark]'`` and
Java 17+; about a minute on a laptop). ``--master spark://host:7077`` runs it on a standalone
cluster (see "Running on a cluster" in docs/spark.md).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ampsclient.command import Command
from ampsclient.stores.publish import MemoryPublishStore
from ampsclient.sync import Client, HAClient
from ampsclient_server_stub.harness import ServerProcess

SYMBOLS = ["AAPL", "MSFT", "IBM", "ORCL", "NVDA", "AMZN"]
POSITIONS = "/spark/positions"
CONFIG = """<AMPSConfig>
  <Name>spark-pipeline</Name>
  <Transports>
    <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:9007</InetAddr>
      <Protocol>amps</Protocol></Transport>
    <Transport><Name>ws</Name><Type>websocket</Type><InetAddr>127.0.0.1:9008</InetAddr>
      <Protocol>amps</Protocol></Transport>
  </Transports>
  <TransactionLog>
    <!-- Spark reads replay the log: orders, the planner's fences, the positions' updates -->
    <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
    <Topic><Name>ampsclient.spark.fence</Name><MessageType>json</MessageType></Topic>
    <Topic><Name>/spark/positions</Name><MessageType>json</MessageType></Topic>
  </TransactionLog>
  <SOW>
    <Topic><Name>/ADMIN/bookmark_store</Name><MessageType>json</MessageType>
      <Key>/clientName</Key><Key>/subId</Key></Topic>
    <Topic><Name>/spark/positions</Name><MessageType>json</MessageType>
      <Key>/symbol</Key></Topic>
  </SOW>
</AMPSConfig>
"""
ORDER_SCHEMA = "order_id BIGINT, symbol STRING, side STRING, qty BIGINT, px DOUBLE"


def publish_orders(uri: str, first: int, count: int, rng: random.Random) -> None:
    """Publish ``count`` orders reliably (an HA client, persisted before returning)."""
    with HAClient(f"order-gateway-{uuid.uuid4().hex[:6]}", MemoryPublishStore()) as client:
        client.get_server_chooser().add(uri)
        client.connect_and_logon()
        for i in range(first, first + count):
            order = {
                "order_id": i,
                "symbol": rng.choice(SYMBOLS),
                "side": rng.choice(["buy", "sell"]),
                "qty": rng.randrange(1, 20) * 100,
                "px": round(rng.uniform(50, 500), 2),
            }
            client.publish("orders", json.dumps(order))
        client.publish_flush(60_000)


def sow(uri: str, topic: str) -> list[dict[str, Any]]:
    """The SOW topic's records, sorted by symbol."""
    with Client(f"sow-reader-{uuid.uuid4().hex[:6]}") as client:
        client.connect_and_logon(uri)
        stream = client.execute(Command("sow").set_topic(topic).set_batch_size(100))
        records = [json.loads(m.data) for m in stream if m.command == "sow"]
    return sorted(records, key=lambda r: r["symbol"])


def show(title: str, records: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    print(f"  {'symbol':6} {'position':>9} {'notional':>14} {'orders':>7}")
    for r in records:
        print(f"  {r['symbol']:6} {r['position']:>9} {r['notional']:>14,.2f} {r['orders']:>7}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--uri", help=f"an AMPS server with a SOW topic {POSITIONS} keyed by /symbol"
    )
    parser.add_argument("--orders", type=int, default=5000, help="orders in the day")
    parser.add_argument("--batches", type=int, default=3, help="live rounds while streaming")
    parser.add_argument(
        "--master",
        default="local[2]",
        help="Spark master: local[N] (default local[2]) or a cluster, e.g. spark://host:7077 "
        "(the workers need ampsclient[spark] installed and must reach the server)",
    )
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    rng = random.Random(42)

    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="spark-pipeline-")))
        uri = args.uri
        if uri is None:
            (work / "amps.xml").write_text(CONFIG)
            server = ServerProcess(data_dir=work / "amps", config=work / "amps.xml")
            stack.enter_context(server)
            uri = server.uri()
            print(f"started a reference server at {uri}")

        # -- 2. a day of orders --------------------------------------------------------------
        t0 = time.perf_counter()
        publish_orders(uri, 0, args.orders, rng)
        print(f"published {args.orders} orders in {time.perf_counter() - t0:.1f} s")

        from pyspark.sql import SparkSession, functions as F

        from ampsclient.spark import register

        spark = (
            SparkSession.builder.master(args.master)
            .appName("amps-spark-pipeline")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        stack.callback(spark.stop)
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)  # not needed when ampsclient[spark] is installed (auto-registered)
        print(f"running on {spark.sparkContext.master}")

        # -- 3. replay the day, aggregate -----------------------------------------------------
        day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        orders = (
            spark.read.format("amps")
            .option("uri", uri)
            .option("topic", "orders")
            .option("begin", day.isoformat())
            .option("end", (day + timedelta(days=1)).isoformat())  # stops at the log's end now
            .option("numPartitions", 2)
            .option("parse", "json")
            .option("schema", ORDER_SCHEMA)
            .load()
        )

        def positions(df: Any) -> Any:
            signed = F.when(F.col("side") == "buy", F.col("qty")).otherwise(-F.col("qty"))
            return df.groupBy("symbol").agg(
                F.sum(signed).alias("position"),
                F.round(F.sum(signed * F.col("px")), 2).alias("notional"),
                F.count("*").alias("orders"),
            )

        t0 = time.perf_counter()
        daily = positions(orders).cache()
        rows = daily.count()
        last = orders.agg(F.max("bookmark").alias("b"), F.count("*").alias("n")).collect()[0]
        print(
            f"replayed {last.n} orders of {day:%Y-%m-%d} in {orders.rdd.getNumPartitions()} "
            f"partitions and aggregated {rows} symbols in {time.perf_counter() - t0:.1f} s"
        )

        # -- 4. write the positions to the SOW topic -----------------------------------------
        writer = (
            daily.write.format("amps")
            .option("uri", uri)
            .option("topic", POSITIONS)
            .option("writeId", f"positions-{day:%Y%m%d}-{uuid.uuid4().hex[:6]}")
            .mode("append")
        )
        writer.save()
        writer.save()  # a retry of the whole job: de-duplicated by the server
        show(f"{POSITIONS} after the batch job (written twice, stored once):", sow(uri, POSITIONS))

        # -- 5. keep it up to date from the live stream ---------------------------------------
        # a streaming aggregation must see the whole day, so it starts at the day's beginning;
        # its first micro-batches catch up (maxRowsPerBatch), then it follows new orders
        live = (
            spark.readStream.format("amps")
            .option("uri", uri)
            .option("topic", "orders")
            .option("begin", day.isoformat())
            .option("parse", "json")
            .option("schema", ORDER_SCHEMA)
            .option("maxRowsPerBatch", max(1000, args.orders // 2))
            .load()
        )
        run_id = uuid.uuid4().hex[:6]

        def upsert(changed: Any, batch_id: int) -> None:
            # Python sinks support append mode only, so the updated aggregates of each
            # micro-batch are written with the batch writer; a writeId per micro-batch makes a
            # replayed batch (after a failure) a no-op at the server
            changed.write.format("amps").option("uri", uri).option("topic", POSITIONS).option(
                "writeId", f"positions-live-{run_id}-{batch_id}"
            ).mode("append").save()

        query = (
            positions(live)
            .writeStream.outputMode("update")
            .foreachBatch(upsert)
            .option("checkpointLocation", str(work / "checkpoint"))
            .trigger(processingTime="1 second")
            .start()
        )
        stack.callback(query.stop)
        query.processAllAvailable()
        print(f"\nstreaming query caught up with the day in {len(query.recentProgress)} batches")
        published = args.orders
        for round_ in range(1, args.batches + 1):
            n = rng.randrange(100, 400)
            publish_orders(uri, published, n, rng)
            published += n
            query.processAllAvailable()
            progress = query.lastProgress or {}
            show(
                f"round {round_}: {n} new orders -> micro-batch {progress.get('batchId')} "
                f"({progress.get('numInputRows')} rows); {POSITIONS}:",
                sow(uri, POSITIONS),
            )
        query.stop()
        total = sum(r["orders"] for r in sow(uri, POSITIONS))
        assert total == published, (total, published)
        print(f"\nthe SOW accounts for all {published} orders: done")


if __name__ == "__main__":
    main()
