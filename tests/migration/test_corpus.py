"""The official-style script corpus (``tests/migration/corpus/``), run with both clients.

Each script is written only against the official AMPS Python client's API and picks its module
with ``AMPS_MODULE``. Each run gets a fresh journaled reference server (every topic recorded,
so bookmark subscriptions replay) with a SOW topic and a queue (:func:`corpus_config`). With
our package the script always runs; where the official client is installed it runs too, and
both must print exactly the same lines.

Two scripts exercise official classes that misbehave in 5.3.5.14 against any server we could
check (``KNOWN_OFFICIAL_DEFECTS``): they run with our package only and must print what the
AMPS documentation says they should.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

import ampsclient
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ServerConfig, default_config
from ampsclient_server_stub.config_model import SowTopicConfig
from ampsclient_server_stub.queues.config import QueueConfig

pytestmark = pytest.mark.integration

CORPUS = pathlib.Path(__file__).with_name("corpus")
SCRIPTS = sorted(p.name for p in CORPUS.glob("s[0-9][0-9]_*.py"))
OFFICIAL = importlib.util.find_spec("AMPS") is not None

KNOWN_OFFICIAL_DEFECTS: dict[str, tuple[str, str]] = {
    "s04_bookmark_conflating_adapter.py": (
        "the official ConflatingRecoveryPointAdapter never forwarded an update to its delegate "
        "and the process died with SIGSEGV on exit",
        "first [0, 1, 2, 3, 4, 5]\nsecond [6, 7, 8, 9]\n",
    ),
    "s07_bookmark_sow_adapter.py": (
        "the official SOWRecoveryPointAdapter sent its initial sow query and never published a "
        "recovery point, so the restarted subscriber replayed from EPOCH",
        "first [0, 1, 2, 3, 4, 5]\nsecond [6, 7, 8, 9]\n",
    ),
}
"""Scripts run with our package only: (what the official client did, the documented output)."""

NEEDS: dict[str, str] = {
    "s05_bookmark_mmap_store.py": "MMapBookmarkStore",
    "s06_bookmark_ring_store.py": "RingBookmarkStore",
    "s16_publisher_hybrid_store.py": "HybridPublishStore",
}
"""Scripts that need a store class from ampsclient.stores (skipped, naming it, until then)."""


def corpus_config(data_dir: pathlib.Path) -> ServerConfig:
    """The zero config (every topic journaled) with what the scripts use besides: the SOW
    topic ``orders`` (json, keyed by ``/id``) and the queue ``jobs`` (json, one message
    leased per subscription, leases of 30 s)."""
    config = default_config(tcp_port=0, ws_port=0, data_dir=data_dir)
    orders = SowTopicConfig(topic="orders", message_type="json", keys=("/id",))
    jobs = QueueConfig(
        name="jobs", message_type="json", max_per_subscription_backlog=1, lease_period=30.0
    )
    return dataclasses.replace(config, sow_topics=(*config.sow_topics, orders), queues=(jobs,))


def run(script: str, module: str, tmp: pathlib.Path) -> str:
    """Run ``script`` with ``module`` against a fresh journaled server; its standard output."""
    server = ServerThread(corpus_config(tmp / f"server-{module}"), fsync="never")
    server.start()
    try:
        work = tmp / f"work-{module}"
        work.mkdir()
        done = subprocess.run(
            [sys.executable, str(CORPUS / script), server.uri("tcp", "json"), str(work)],
            env=dict(os.environ, AMPS_MODULE=module),
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
    finally:
        server.stop()
    assert done.returncode == 0, f"{script} with {module}:\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_corpus_is_large_enough() -> None:
    assert len(SCRIPTS) >= 40


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_prints_the_same_with_both_clients(script: str, tmp_path: pathlib.Path) -> None:
    needed = NEEDS.get(script)
    if needed is not None and not hasattr(ampsclient, needed):
        pytest.skip(f"ampsclient.{needed} is not there yet")
    ours = run(script, "ampsclient", tmp_path)
    assert ours.strip(), "the script printed nothing"
    if script in KNOWN_OFFICIAL_DEFECTS:
        assert ours == KNOWN_OFFICIAL_DEFECTS[script][1]
        return
    if not OFFICIAL:
        pytest.skip("the official AMPS client is not installed (our run passed)")
    assert ours == run(script, "AMPS", tmp_path)
