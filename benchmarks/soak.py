"""Soak: the chaos run (``tests/chaos/run.py``) for a long time, with resources watched.

    .venv/bin/python benchmarks/soak.py --seconds 1800                 # 30 minutes
    .venv/bin/python benchmarks/soak.py --seconds 1800 --replicated    # the hot-hot pair
    .venv/bin/python benchmarks/soak.py --seconds 20 --window 5        # the test's short form

What runs is the chaos runner unchanged (:func:`tests.chaos.run.main`): the reference server
with a transaction log, the topic ``chaos`` and the queue ``chaos_q`` over it, HA publishers
with file publish stores, bookmark subscribers, queue consumers, and faults at random
(``kill -9`` of the server, of publishers, subscribers and consumers, proxy cuts and stalls;
``--net-faults`` adds the netem-like faults) until ``--seconds`` have passed, then the exact
ledger check: every acknowledged message delivered once to every subscriber, in order per
publisher, and the queue audit.

Around it, this script samples every ``--sample`` seconds the RSS and open file descriptors
of every process of the run (the server, each worker, and this process, which holds the
loopback proxies) and the number of journal files; afterwards it reads the subscribers'
ledgers (each delivery carries its publish time and its receipt time) and reports, per
``--window`` (300 s by default): deliveries per second, latency percentiles (publish to
receipt, including the outages the faults cause), and RSS and descriptors at the window's
end. The figures go to stdout and, as JSON, to ``<work>/soak.json``. The exit status is the
chaos run's (0 only when every check passed) or 1 when a sampled figure grew without bound
(``--max-growth-mb``: the server's RSS at the end against its RSS at the end of the first
window).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children[ppid].append(int(entry))
    out: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            out.append(child)
            todo.append(child)
    return out


def _label(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return None
    words = [a.decode(errors="replace") for a in argv if a]
    name = words[words.index("--name") + 1] if "--name" in words[:-1] else ""
    if "ampsclient_server_stub" in words:  # python -m ampsclient_server_stub --name chaos|A|B
        return "server" if name in ("chaos", "") else f"server-{name}"
    if name and "--role" in words:
        return name
    return None


def kind(label: str) -> str:
    """``server``, ``pub``, ``sub``, ``consumer`` or ``soak`` (this process: the proxies)."""
    return label.split("-", 1)[0]


def journal_dirs(work: Path) -> dict[str, Path]:
    """The run's journal directories: ``journal`` (one server), ``A`` and ``B`` (the pair)."""
    dirs = {"journal": work / "journal"}
    cluster = work / "cluster"
    if cluster.is_dir():
        dirs = {node.name: node / "journal" for node in sorted(cluster.iterdir()) if node.is_dir()}
    return dirs


def journal_segments(directory: Path) -> list[str]:
    """The journal files (segments, plain or compressed) in ``directory``."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(n for n in names if n.endswith((".journal", ".journal.gz")))


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def sample(work: Path, t0: float, seen: dict[str, set[str]] | None = None) -> dict[str, Any]:
    """One sample: ``{"t": seconds, "procs": {label: [rss_kb, fds]}, "journal_files": n,
    "journals": {dir: n}}``; the journal file names found are added to ``seen``."""
    me = os.getpid()
    procs: dict[str, list[int]] = {"soak": [_rss_kb(me), _fds(me)]}
    for pid in _descendants(me):
        label = _label(pid)
        if label is not None:
            rss, fds = _rss_kb(pid), _fds(pid)
            if label.startswith("server") and "server" in procs and label == "server":
                # the old and the new server during a restart: keep the larger
                rss = max(rss, procs["server"][0])
            procs[label] = [rss, fds]
    journals: dict[str, int] = {}
    for name, directory in journal_dirs(work).items():
        segments = journal_segments(directory)
        journals[name] = len(segments)
        if seen is not None:
            seen.setdefault(name, set()).update(segments)
    return {
        "t": round(time.monotonic() - t0, 2),
        "procs": procs,
        "journal_files": sum(journals.values()),
        "journals": journals,
    }


def resources(samples: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per process (label) and per kind of process (the sum over the processes of that kind
    in each sample): RSS in MB and open descriptors at the first sample, the peak and the
    last sample."""
    per_label: dict[str, list[list[int]]] = defaultdict(list)
    per_kind: dict[str, list[list[int]]] = defaultdict(list)
    for s in samples:
        sums: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for label, (rss, fds) in s["procs"].items():
            per_label[label].append([rss, fds])
            sums[kind(label)][0] += rss
            sums[kind(label)][1] += fds
        for k, v in sums.items():
            per_kind[k].append(v)

    def summary(values: list[list[int]]) -> dict[str, float]:
        rss = [v[0] for v in values]
        fds = [v[1] for v in values]
        return {
            "rss_mb_start": round(rss[0] / 1024, 1),
            "rss_mb_peak": round(max(rss) / 1024, 1),
            "rss_mb_end": round(rss[-1] / 1024, 1),
            "fds_start": fds[0],
            "fds_peak": max(fds),
            "fds_end": fds[-1],
        }

    return {
        "per_process": {k: summary(v) for k, v in sorted(per_label.items())},
        "per_kind": {k: summary(v) for k, v in sorted(per_kind.items())},
    }


def journal_summary(
    samples: list[dict[str, Any]], seen: dict[str, set[str]], work: Path
) -> dict[str, dict[str, int]]:
    """Per journal directory: files at the first sample, the peak and the end, files created
    and files removed (seen in a sample and gone at the end) during the run."""
    out: dict[str, dict[str, int]] = {}
    for name, directory in journal_dirs(work).items():
        counts = [s["journals"].get(name, 0) for s in samples if "journals" in s]
        end = set(journal_segments(directory))
        names = seen.get(name, set()) | end
        out[name] = {
            "files_start": counts[0] if counts else 0,
            "files_peak": max(counts, default=0),
            "files_end": len(end),
            "files_seen": len(names),
            "files_removed": len(names - end),
        }
    return out


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    i = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[i]


def analyse(
    work: Path, samples: list[dict[str, Any]], wall0: float, window: float
) -> dict[str, Any]:
    """Per-window deliveries, latency percentiles and resources from the ledgers and samples."""
    from tests.chaos.run import iter_lines

    per_window: dict[int, list[float]] = defaultdict(list)
    for ledger in sorted(work.glob("sub-*.ledger")):
        for line in iter_lines(ledger):
            msg = line.get("msg")
            if not msg or "rt" not in msg:
                continue
            per_window[int((msg["rt"] - wall0) // window)].append(msg["rt"] - msg["t"])
    windows = []
    last_index = max(per_window, default=-1)
    for i in range(last_index + 1):
        lat = sorted(per_window.get(i, []))
        inside = [s for s in samples if i * window <= s["t"] < (i + 1) * window]
        end = inside[-1] if inside else (samples[-1] if samples else {"procs": {}})
        server = [v for k, v in end["procs"].items() if k.startswith("server")]
        clients = [v for k, v in end["procs"].items() if not k.startswith("server")]
        server_peak = max(
            (sum(v[0] for k, v in s["procs"].items() if k.startswith("server")) for s in inside),
            default=0,
        )
        windows.append(
            {
                "window": i,
                "from_s": i * window,
                "deliveries": len(lat),
                "deliveries_per_s": round(len(lat) / window, 1),
                "latency_ms": {
                    q: round(1000 * _percentile(lat, p), 1)
                    for q, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))
                },
                "server_rss_mb_end": round(sum(v[0] for v in server) / 1024, 1),
                "server_rss_mb_peak": round(server_peak / 1024, 1),
                "server_fds_end": sum(v[1] for v in server),
                "clients_rss_mb_end": round(sum(v[0] for v in clients) / 1024, 1),
                "clients_fds_end": sum(v[1] for v in clients),
                "client_processes": len(clients),
                "journal_files_end": end.get("journal_files", 0),
            }
        )
    return {"windows": windows}


def _print_windows(result: dict[str, Any]) -> None:
    print(
        "window  deliveries/s  p50 ms  p99 ms  max ms  server RSS MB end/peak  server fds"
        "  clients RSS MB  client fds  journal files",
        flush=True,
    )
    for w in result["windows"]:
        lat = w["latency_ms"]
        print(
            f"{w['from_s']:>6.0f}  {w['deliveries_per_s']:>12.1f}  {lat['p50']:>6.1f}  "
            f"{lat['p99']:>6.1f}  {lat['max']:>6.0f}  "
            f"{w['server_rss_mb_end']:>10.1f}/{w['server_rss_mb_peak']:<10.1f}  "
            f"{w['server_fds_end']:>10}  {w['clients_rss_mb_end']:>14.1f}  "
            f"{w['clients_fds_end']:>10}  {w['journal_files_end']:>13}",
            flush=True,
        )


def _print_resources(result: dict[str, Any]) -> None:
    print("processes   RSS MB start/peak/end   open fds start/peak/end", flush=True)
    for k, v in result["resources"]["per_kind"].items():
        print(
            f"{k:<10}  {v['rss_mb_start']:>6.1f}/{v['rss_mb_peak']:>6.1f}/{v['rss_mb_end']:>6.1f}"
            f"     {v['fds_start']:>5}/{v['fds_peak']:>5}/{v['fds_end']:>5}",
            flush=True,
        )
    for name, j in result["journals"].items():
        print(
            f"journal {name}: files start {j['files_start']}, peak {j['files_peak']}, "
            f"end {j['files_end']}; {j['files_seen']} seen, {j['files_removed']} removed",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=1800.0)
    parser.add_argument("--window", type=float, default=300.0, help="report window, seconds")
    parser.add_argument("--sample", type=float, default=5.0, help="resource sample period")
    parser.add_argument("--work", default=None)
    parser.add_argument("--seed", type=int, default=20_261_128)
    parser.add_argument("--max-growth-mb", type=float, default=200.0)
    args, chaos_args = parser.parse_known_args(argv)
    from tests.chaos import run

    with contextlib.ExitStack() as stack:
        if args.work is None:
            args.work = stack.enter_context(tempfile.TemporaryDirectory(prefix="ampsclient-soak-"))
        work = Path(args.work).resolve()
        work.mkdir(parents=True, exist_ok=True)
        samples: list[dict[str, Any]] = []
        seen: dict[str, set[str]] = {}
        stop = threading.Event()
        t0 = time.monotonic()
        wall0 = time.time()

        def sampler() -> None:
            while True:
                samples.append(sample(work, t0, seen))
                if stop.wait(args.sample):
                    return

        thread = threading.Thread(target=sampler, daemon=True)
        thread.start()
        rc = run.main(
            [
                *("--seconds", str(args.seconds), "--seed", str(args.seed)),
                *("--work", str(work), *chaos_args),
            ]
        )
        stop.set()
        thread.join(10)
        result = analyse(work, samples, wall0, args.window)
        result["chaos_exit_status"] = rc
        result["seconds"] = args.seconds
        result["elapsed_s"] = round(time.monotonic() - t0, 1)
        servers = [
            (s["t"], sum(v[0] for k, v in s["procs"].items() if k.startswith("server")))
            for s in samples
        ]
        servers = [(t, kb) for t, kb in servers if kb]
        growth = 0.0
        if servers:
            first_end = [kb for t, kb in servers if t < min(args.window, args.seconds)]
            base = first_end[-1] if first_end else servers[0][1]
            result["server_rss_mb"] = {
                "start": round(servers[0][1] / 1024, 1),
                "end_of_first_window": round(base / 1024, 1),
                "peak": round(max(kb for _, kb in servers) / 1024, 1),
                "end": round(servers[-1][1] / 1024, 1),
            }
            growth = (servers[-1][1] - base) / 1024
        result["resources"] = resources(samples)
        result["journals"] = journal_summary(samples, seen, work)
        result["args"] = {"soak": vars(args), "chaos": chaos_args}
        (work / "soak.json").write_text(json.dumps(result, indent=1))
        (work / "soak-samples.json").write_text(json.dumps(samples))
        _print_windows(result)
        print(f"soak: server RSS MB {result.get('server_rss_mb')}", flush=True)
        _print_resources(result)
        print(f"soak: {len(samples)} resource samples, figures in {work / 'soak.json'}", flush=True)
        if growth > args.max_growth_mb:
            print(f"soak: FAIL server RSS grew {growth:.0f} MB after the first window", flush=True)
            return 1
        return rc


if __name__ == "__main__":
    sys.exit(main())
