"""The reference server's own speed, measured with a C publisher and a C subscriber.

The load comes from ``benchmarks/server_load.c`` (compiled with ``cc`` on first use): a
publisher and a subscriber that cost next to nothing, so what is measured is the server. The
subscriber checks every delivery (ids 1..N in order: no loss, no duplicate, publisher order).
Each measurement gets a fresh server process (journal on, group-committed fsync, the
default) unless said otherwise.

Paths (``--paths``, all by default):

* ``plain``: N plain publishes + ``flush`` (msgs/s to the flush's ack);
* ``deliver``: N plain publishes delivered to one subscriber (msgs/s, first publish to last
  delivery);
* ``seq``: N sequenced publishes (the HAClient shape) to the persisted ack of the last;
* ``ws_pub`` / ``ws_deliver``: ``plain`` over ws:// / delivery to a ws:// subscriber (the
  publisher on tcp://);
* ``replay``: a journal of N records (written through the server) replayed from EPOCH to one
  subscriber (msgs/s, first to last delivery); server RSS at start and peak.

Variants (``--variants``): ``c`` (this tree, with the C speedups), ``py`` (this tree,
``AMPSCLIENT_PUREPYTHON=1``), ``base`` (another tree given by ``--base``: the code before a
change, for before/after in one run). Runs alternate variants; medians and ranges are printed,
with the server's CPU per message and the load average.

Usage: ``python benchmarks/server_bench.py [-n 300000] [--runs 5] [--base /tmp/base]``.

``--profile DIR`` attaches py-spy (``py-spy record --pid``, 250 samples a second, raw
collapsed stacks) to the server for each measurement and writes
``DIR/<path>-<variant>-<run>.txt``; the profiler's own cost then shows in the figures.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
TREE = HERE.parent
SOURCE = HERE / "server_load.c"
BINARY = HERE / ".build" / "server_load"
PATHS = ("plain", "deliver", "seq", "ws_pub", "ws_deliver", "replay")


def build() -> Path:
    """Compile the load generator if its binary is missing or older than its source."""
    if BINARY.exists() and BINARY.stat().st_mtime >= SOURCE.stat().st_mtime:
        return BINARY
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("server_bench needs a C compiler (cc)")
    BINARY.parent.mkdir(exist_ok=True)
    subprocess.run([cc, "-O2", "-o", str(BINARY), str(SOURCE)], check=True)
    return BINARY


@dataclass
class Server:
    proc: subprocess.Popen[str]
    tcp: int
    ws: int
    lines: list[str] = field(default_factory=list)

    def cpu(self) -> float:
        """Seconds of CPU the server used so far."""
        with open(f"/proc/{self.proc.pid}/stat") as stat:
            parts = stat.read().rsplit(")", 1)[1].split()
        return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")

    def status(self, key: str) -> int:
        """A ``/proc/PID/status`` figure in KiB (``VmRSS``, ``VmHWM``)."""
        with open(f"/proc/{self.proc.pid}/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        return 0


@contextmanager
def server(tree: Path, pure: bool, data_dir: Path | None) -> Iterator[Server]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    env.pop("AMPSCLIENT_PUREPYTHON", None)
    if pure:
        env["AMPSCLIENT_PUREPYTHON"] = "1"
    args = ["--tcp-port", "0", "--ws-port", "0", "--log-level", "INFO"]
    if data_dir is not None:
        args += ["--data-dir", str(data_dir)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ampsclient_server_stub", *args],
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(tree),
        env=env,
    )
    assert proc.stderr is not None
    seen: list[str] = []
    try:
        for line in proc.stderr:
            seen.append(line)
            m = re.search(r"listening tcp://127\.0\.0\.1:(\d+) ws://127\.0\.0\.1:(\d+)", line)
            if m:  # keep reading its log (a full pipe would block the server)
                threading.Thread(target=proc.stderr.read, daemon=True).start()
                yield Server(proc, int(m.group(1)), int(m.group(2)))
                return
        raise SystemExit("the server did not start:\n" + "".join(seen[-20:]))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)


def load(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([str(BINARY), *args], stdout=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], timeout: float = 600) -> tuple[int, int]:
    out, _ = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"server_load failed ({proc.returncode}): {out!r}")
    a, b = out.split()[-2:]
    return int(a), int(b)


def subscriber(
    kind: str, port: int, n: int, topic: str, bookmark: str = ""
) -> subprocess.Popen[str]:
    args = ["sub", kind, str(port), str(n), topic] + ([bookmark] if bookmark else [])
    proc = load(*args)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise SystemExit("the subscriber did not start")
    return proc


@dataclass
class Result:
    rate: float
    cpu_us: float
    rss_start: int = 0
    rss_peak: int = 0


@contextmanager
def profiled(srv: Server, out: Path | None) -> Iterator[None]:
    """py-spy attached to the server while the block runs (nothing when ``out`` is None)."""
    if out is None:
        yield
        return
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    args = [spy, "record", "--pid", str(srv.proc.pid), "-r", "250", "-f", "raw", "-o", str(out)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:  # wait until it samples (py-spy says so on stdout)
        if "Sampling process" in line:
            break
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


def measure(
    path: str, n: int, tree: Path, pure: bool, workdir: Path, profile: Path | None = None
) -> Result:
    if path == "replay":
        return replay(n, tree, pure, workdir, profile)
    data = Path(tempfile.mkdtemp(dir=workdir))
    try:
        with server(tree, pure, data) as srv, profiled(srv, profile):
            cpu0 = srv.cpu()
            if path in ("plain", "seq", "ws_pub"):
                kind, port = ("ws", srv.ws) if path == "ws_pub" else ("tcp", srv.tcp)
                mode = "seq" if path == "seq" else "plain"
                start, end = finish(load("pub", kind, str(port), str(n), "bench", mode))
            else:
                kind, port = ("ws", srv.ws) if path == "ws_deliver" else ("tcp", srv.tcp)
                sub = subscriber(kind, port, n, "bench")
                start, _ = finish(load("pub", "tcp", str(srv.tcp), str(n), "bench", "plain"))
                _, end = finish(sub)
            cpu = srv.cpu() - cpu0
            return Result(n / ((end - start) / 1e9), cpu / n * 1e6, 0, srv.status("VmHWM"))
    finally:
        shutil.rmtree(data, ignore_errors=True)


_journals: dict[tuple[str, int], Path] = {}


def replay(n: int, tree: Path, pure: bool, workdir: Path, profile: Path | None = None) -> Result:
    key = (str(tree), n)
    data = _journals.get(key)
    if data is None:  # written once per tree and size, through the server
        data = _journals[key] = Path(tempfile.mkdtemp(dir=workdir))
        with server(tree, False, data) as srv:
            finish(load("pub", "tcp", str(srv.tcp), str(n), "bench", "plain"))
    with server(tree, pure, data) as srv, profiled(srv, profile):
        rss0 = srv.status("VmRSS")
        cpu0 = srv.cpu()
        first, last = finish(subscriber("tcp", srv.tcp, n, "bench", "0"))
        cpu = srv.cpu() - cpu0
        return Result(n / ((last - first) / 1e9), cpu / n * 1e6, rss0, srv.status("VmHWM"))


def fmt(rate: float) -> str:
    return f"{rate / 1e6:.2f} M" if rate >= 1e6 else f"{rate / 1e3:.0f} k"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=300_000)
    parser.add_argument("--replay-n", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--variants", default="c,py")
    parser.add_argument("--base", type=Path, default=None, help="tree of the 'base' variant")
    parser.add_argument("--profile", type=Path, default=None, help="py-spy output directory")
    opts = parser.parse_args()
    build()
    variants = opts.variants.split(",")
    if "base" in variants and opts.base is None:
        raise SystemExit("--variants base needs --base TREE")
    trees = {"c": (TREE, False), "py": (TREE, True), "base": (opts.base, False)}
    results: dict[tuple[str, str], list[Result]] = {}
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="server-bench-") as tmp:
        workdir = Path(tmp)
        for run in range(opts.runs):
            for path in opts.paths.split(","):
                n = opts.replay_n if path == "replay" else opts.n
                for variant in variants:
                    tree, pure = trees[variant]
                    out = None
                    if opts.profile is not None:
                        opts.profile.mkdir(parents=True, exist_ok=True)
                        out = opts.profile / f"{path}-{variant}-{run + 1}.txt"
                    r = measure(path, n, tree, pure, workdir, out)
                    results.setdefault((path, variant), []).append(r)
                    loads.append(os.getloadavg()[0])
                    extra = (
                        f" rss {r.rss_start // 1024}->{r.rss_peak // 1024} MiB"
                        if r.rss_start
                        else ""
                    )
                    print(
                        f"run {run + 1} {path:<10} {variant:<4} {fmt(r.rate):>8} msgs/s "
                        f"server {r.cpu_us:.2f} us/msg{extra} (load {loads[-1]:.2f})",
                        flush=True,
                    )
    print(f"\nmedian (range) of {opts.runs} runs; load average {min(loads):.2f}-{max(loads):.2f}")
    for (path, variant), rs in results.items():
        rates = [r.rate for r in rs]
        cpu = statistics.median(r.cpu_us for r in rs)
        rss = max(r.rss_peak for r in rs) // 1024
        print(
            f"{path:<10} {variant:<4} {fmt(statistics.median(rates)):>8} "
            f"({fmt(min(rates))}-{fmt(max(rates))}) server {cpu:.2f} us/msg, peak RSS {rss} MiB"
        )


if __name__ == "__main__":
    main()
