"""Our HAClient vs the official HAClient: publish + publish_flush, memory and file stores,
against the minimal sink and against the reference server; plus failover time.

Usage: ``python benchmarks/ha_vs_official.py [-n 300000]``. Prints msgs/s and ratios; the
official client (``pip install amps-python-client``) is optional.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

sys.path.insert(0, os.path.dirname(__file__))

from publish_vs_official import reference_server, report
from sink import SinkServer

from ampsclient import Client
from ampsclient.ha import DefaultServerChooser, FixedDelayStrategy
from ampsclient.stores.publish import FilePublishStore, MemoryPublishStore
from ampsclient.sync import HAClient
from ampsclient_server_stub.harness import ServerProcess

try:
    import AMPS  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover
    AMPS = None

DATA = '{"id":1,"sym":"IBM","px":101.5}'


@contextlib.contextmanager
def tempdir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="ampsbench-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def ours(store: str, path: str) -> Callable[[str, str], object]:
    def make(name: str, uri: str) -> object:
        if store == "memory":
            ps: object = MemoryPublishStore()
        else:
            ps = FilePublishStore(os.path.join(path, name), fsync=store)
        client = HAClient(name, ps)
        client.get_server_chooser().add(uri)
        return client

    return make


def official(store: str, path: str) -> Callable[[str, str], object]:
    def make(name: str, uri: str) -> object:
        if store == "memory":
            client = AMPS.HAClient(name)
        else:
            client = AMPS.HAClient(name, os.path.join(path, name + ".store"))
        chooser = AMPS.DefaultServerChooser()
        chooser.add(uri)
        client.set_server_chooser(chooser)
        return client

    return make


def run(make: Callable[[str, str], object], uri: str, n: int, name: str) -> float:
    client = make(name, uri)
    client.connect_and_logon()  # type: ignore[attr-defined]
    publish = client.publish  # type: ignore[attr-defined]
    start = time.perf_counter()
    for _ in range(n):
        publish("orders", DATA)
    client.publish_flush(300_000)  # type: ignore[attr-defined]
    took = time.perf_counter() - start
    client.close()  # type: ignore[attr-defined]
    return n / took


def failover_time(heartbeat: float = 1.0, rounds: int = 3, freeze: bool = False) -> list[float]:
    """Seconds from a kill -9 of server A (or, with ``freeze``, a SIGSTOP: the socket stays
    open and only the heartbeat can tell) to the first message accepted by server B."""
    times = []
    with tempdir() as d:
        for r in range(rounds):
            a = ServerProcess(data_dir=os.path.join(d, f"a{r}"), name="A")
            b = ServerProcess(data_dir=os.path.join(d, f"b{r}"), name="B")
            with a, b, Client("watch") as watch:
                watch.connect(b.uri())
                watch.logon(5000)
                got = []
                watch.subscribe(lambda m: got.append(time.perf_counter()), "failover")
                ha = HAClient(f"failover-{r}", reconnect_delay_strategy=FixedDelayStrategy(50))
                chooser = DefaultServerChooser(a.uri(), b.uri())
                ha.set_server_chooser(chooser)
                ha.set_heartbeat(heartbeat)
                ha.connect_and_logon()
                killed = time.perf_counter()
                if freeze:
                    assert a.pid is not None
                    os.kill(a.pid, signal.SIGSTOP)
                else:
                    a.kill()
                deadline = killed + 30
                while not got and time.perf_counter() < deadline:
                    ha.publish("failover", "{}")
                    time.sleep(0.002)
                ha.close()
                if freeze:
                    assert a.pid is not None
                    os.kill(a.pid, signal.SIGCONT)
                if got:
                    times.append(got[0] - killed)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=300_000)
    parser.add_argument(
        "--paths", default="sink,server,failover", help="comma list of: sink, server, failover"
    )
    args = parser.parse_args()
    n = args.n
    paths = set(args.paths.split(","))
    print(f"{n:,} messages per run")
    with tempdir() as d:
        if "sink" in paths:
            with SinkServer() as sink:
                for store in ("memory", "never"):
                    label = "memory store" if store == "memory" else "file store (no fsync)"
                    a = run(ours(store, d), sink.uri(), n, f"ours-{store}")
                    b = run(official(store, d), sink.uri(), n, f"off-{store}") if AMPS else None
                    report(f"HA {label} -> sink", a, b)
                a = run(ours("always", d), sink.uri(), min(n, 50_000), "ours-always")
                report("HA file store fsync=always -> sink", a, None)
                a = run(ours("interval", d), sink.uri(), n, "ours-interval")
                report("HA file store fsync=interval -> sink", a, None)
        if "server" in paths:
            # a fresh server for each run: a later run would find a longer journal
            for store in ("memory", "never"):
                label = "memory store" if store == "memory" else "file store (no fsync)"
                with reference_server() as uri:
                    a = run(ours(store, d), uri, n, f"ours-e2e-{store}")
                b = None
                if AMPS:
                    with reference_server() as uri:
                        b = run(official(store, d), uri, n, f"off-e2e-{store}")
                report(f"HA {label} -> reference server", a, b)
    if "failover" in paths:
        for freeze, what in ((False, "kill -9"), (True, "SIGSTOP (frozen, socket open)")):
            times = failover_time(freeze=freeze)
            print(
                f"failover ({what} of A to the first message on B, heartbeat 1 s): "
                + ", ".join(f"{t * 1000:.1f} ms" for t in times)
            )


if __name__ == "__main__":
    main()
