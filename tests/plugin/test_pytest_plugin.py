"""The pytest plugin (``ampsclient_server_stub.pytest_plugin``), as a user's project sees it.

Each test writes a user's test file and runs pytest on it (``pytester``, in this process);
the plugin is the one installed with the package (the ``pytest11`` entry point), so these
tests also prove that it is registered. Servers are real, on 127.0.0.1, ports picked free.
"""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from ampsclient_server_stub.testing import Inbox

pytest_plugins = ["pytester"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

# the inner runs load every installed plugin, as a user's would (pytest-asyncio: say its scope)
RUN = ("-p", "no:cacheprovider", "-q", "-o", "asyncio_default_fixture_loop_scope=function")


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*RUN, *args)


def refused(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(5)
        return s.connect_ex(("127.0.0.1", port)) != 0


# --------------------------------------------------------------------------- registration


def test_the_entry_point_registers_the_plugin_with_its_fixtures_and_option(
    pytester: pytest.Pytester,
) -> None:
    result = run(pytester, "--fixtures")
    for name in (
        "amps_server",
        "amps_server_factory",
        "amps_server_session",
        "amps_server_session_options",
        "amps_replicated_pair",
        "amps_fault_proxy",
        "amps_fault_proxy_factory",
        "amps_collector",
        "amps_topic",
    ):
        result.stdout.fnmatch_lines([f"{name}*"])
    run(pytester, "--help").stdout.fnmatch_lines(["*--amps-server-log-level=LEVEL*"])
    markers = run(pytester, "--markers")
    markers.stdout.fnmatch_lines(
        ["@pytest.mark.amps_server(*", "@pytest.mark.amps_replicated_pair(*"]
    )


def test_loading_the_plugin_imports_no_server() -> None:
    """pytest imports the plugin at start-up in every project that installs the package
    (before pytest-cov starts measuring): it must stay light."""
    code = (
        "import sys, ampsclient_server_stub.pytest_plugin\n"
        "heavy = [m for m in sys.modules if m.startswith('ampsclient_server_stub.')"
        " and m != 'ampsclient_server_stub.pytest_plugin']\n"
        "print(heavy)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


# --------------------------------------------------------------------------- amps_server


def test_amps_server_serves_tcp_and_ws_and_stops_at_teardown(pytester: pytest.Pytester) -> None:
    ports = pytester.path / "ports.txt"
    pytester.makepyfile(
        f"""
        from ampsclient import Client

        def test_publish_subscribe(amps_server, amps_collector):
            with open({str(ports)!r}, "w") as f:
                f.write(f"{{amps_server.port('tcp')}} {{amps_server.port('ws')}}")
            assert amps_server.tcp.startswith("tcp://127.0.0.1:")
            assert amps_server.tcp.endswith("/amps/json")
            assert amps_server.ws.startswith("ws://127.0.0.1:")
            assert amps_server.uris == {{"json": amps_server.tcp}}
            assert amps_server.ws_uris == {{"json": amps_server.ws}}
            sub = amps_server.client("sub")
            sub.subscribe(amps_collector, "orders")
            with Client("ws-publisher") as pub:
                pub.connect(amps_server.ws)
                pub.logon(5000)
                for n in range(3):
                    pub.publish("orders", '{{"n": %d}}' % n)
                pub.flush(5000)
            got = amps_collector.wait_for_count(3, timeout=10)
            assert [m.get_data() for m in got] == ['{{"n": 0}}', '{{"n": 1}}', '{{"n": 2}}']
        """
    )
    run(pytester).assert_outcomes(passed=1)
    tcp_port, ws_port = (int(p) for p in ports.read_text().split())
    assert refused(tcp_port) and refused(ws_port)


CONFIG = """\
<AMPSConfig>
  <Name>orders-engine</Name>
  <Transports>
    <Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>9007</InetAddr>
      <MessageType>json</MessageType><Protocol>amps</Protocol></Transport>
    <Transport><Name>nvfix-tcp</Name><Type>tcp</Type><InetAddr>9017</InetAddr>
      <MessageType>nvfix</MessageType><Protocol>amps</Protocol></Transport>
    <Transport><Name>json-ws</Name><Type>ws</Type><InetAddr>9008</InetAddr>
      <MessageType>json</MessageType></Transport>
  </Transports>
  <SOW>
    <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key></Topic>
    <Topic><Name>fills</Name><MessageType>nvfix</MessageType><Key>/Id</Key></Topic>
  </SOW>
</AMPSConfig>
"""


def test_config_from_xml_text_and_file_with_a_uri_per_message_type(
    pytester: pytest.Pytester,
) -> None:
    (pytester.path / "amps.xml").write_text(CONFIG)
    pytester.makepyfile(
        f"""
        import pytest

        CONFIG = {CONFIG!r}

        @pytest.mark.amps_server(config=CONFIG, message_types=["json", "nvfix"])
        def test_from_text(amps_server):
            check(amps_server)

        def test_from_file(amps_server_factory):
            check(amps_server_factory(config="amps.xml"))

        def check(server):
            assert server.name == "orders-engine"
            assert server.message_types == ("json", "nvfix")
            json_uri, nvfix_uri = server.uris["json"], server.uris["nvfix"]
            assert json_uri.endswith("/amps/json") and nvfix_uri.endswith("/amps/nvfix")
            # one listener per message type, as the configuration says; none on 9007/9017
            assert json_uri.split("/")[2] != nvfix_uri.split("/")[2]
            assert ":9007/" not in json_uri and ":9017/" not in nvfix_uri
            assert server.uri("ws", "json").startswith("ws://127.0.0.1:")
            with pytest.raises(ValueError, match="no ws listener .* 'nvfix'"):
                server.uri("ws", "nvfix")
            server.publish("orders", '{{"id": 1, "v": 1}}')
            server.publish("orders", '{{"id": 1, "v": 2}}')
            assert server.sow("orders") == ['{{"id": 1, "v": 2}}']
            server.publish("fills", "Id=7\\x01Qty=5\\x01", message_type="nvfix")
            assert server.sow("fills", message_type="nvfix") == ["Id=7\\x01Qty=5\\x01"]
        """
    )
    run(pytester).assert_outcomes(passed=2)


def test_a_message_type_no_transport_accepts_is_refused_naming_it(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.amps_server(config={CONFIG!r}, message_types=["json", "xml"])
        def test_refused(amps_server):
            pass
        """
    )
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*ConfigError: no transport of the configuration accepts message type 'xml'*"]
    )


def test_marker_arguments_are_keywords(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.amps_server("config.xml")
        def test_positional(amps_server):
            pass
        """
    )
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*@pytest.mark.amps_server takes keyword arguments only*"])


def test_a_process_server_survives_kill_9_with_its_journal(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        from ampsclient_server_stub.testing import read_log

        @pytest.mark.amps_server(process=True)
        def test_kill_restart(amps_server):
            assert amps_server.process is not None and amps_server.running
            amps_server.publish("orders", '{"n": 1}')
            pid = amps_server.process.pid
            amps_server.kill()
            assert not amps_server.running
            amps_server.restart()
            assert amps_server.process.pid != pid
            assert [body for _, body in read_log(amps_server.tcp, "orders")] == [b'{"n": 1}']
            amps_server.publish("orders", '{"n": 2}')
            assert len(read_log(amps_server.tcp, "orders")) == 2
            assert any("listening" in line for line in amps_server.log_lines())
        """
    )
    run(pytester).assert_outcomes(passed=1)


ONE_LISTENER = """\
<AMPSConfig>
  <Name>single</Name>
  <Transports>
    <Transport><Name>fix-tcp</Name><Type>tcp</Type><InetAddr>9007</InetAddr>
      <MessageType>nvfix</MessageType><Protocol>amps</Protocol></Transport>
  </Transports>
  <TransactionLog><JournalDirectory>journal</JournalDirectory>
    <Topic><Name>fills</Name><MessageType>nvfix</MessageType></Topic></TransactionLog>
</AMPSConfig>
"""


def test_a_process_server_runs_an_xml_config_on_free_ports_or_refuses_naming_why(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        f"""
        import pytest
        from ampsclient_server_stub.config import ConfigError
        from ampsclient_server_stub.testing import read_log

        def test_one_listener(amps_server_factory):
            server = amps_server_factory(config={ONE_LISTENER!r}, process=True)
            assert server.name == "single" and server.message_types == ("nvfix",)
            assert ":9007/" not in server.tcp and server.tcp.endswith("/amps/nvfix")
            server.publish("fills", "Id=1\\x01")
            server.restart()
            assert [b for _, b in read_log(server.tcp, "fills")] == [b"Id=1\\x01"]
            assert (server.data_dir / "journal").is_dir()  # relative paths: the data dir

        def test_two_tcp_listeners_are_refused(amps_server_factory):
            with pytest.raises(ConfigError, match="at most one tcp and one ws transport"):
                amps_server_factory(config={CONFIG!r}, process=True)
        """
    )
    run(pytester).assert_outcomes(passed=2)


def test_kill_needs_a_process_server(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        def test_kill(amps_server):
            with pytest.raises(RuntimeError, match="process=True"):
                amps_server.kill()
        """
    )
    run(pytester).assert_outcomes(passed=1)


# --------------------------------------------------------------------------- session scope


def test_the_session_server_is_shared_and_its_options_overridable(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(
        f"""
        import pytest

        @pytest.fixture(scope="session")
        def amps_server_session_options():
            return {{"config": {CONFIG!r}, "message_types": ["nvfix", "json"]}}
        """
    )
    pytester.makepyfile(
        """
        SEEN = []

        def test_one(amps_server_session, amps_topic):
            SEEN.append(amps_server_session.tcp)
            assert amps_server_session.tcp.endswith("/amps/nvfix")  # the first type given
            amps_server_session.publish("orders", '{"id": 1}', message_type="json")

        def test_two(amps_server_session, amps_topic):
            SEEN.append(amps_server_session.tcp)
            assert SEEN[0] == SEEN[1]
            assert amps_server_session.sow("orders", message_type="json") == ['{"id": 1}']
        """
    )
    run(pytester).assert_outcomes(passed=2)


def test_amps_topic_is_the_tests_own(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        TOPICS = []

        @pytest.mark.parametrize("n", [1, 2])
        def test_topic(amps_topic, n):
            assert amps_topic.startswith("test/test_topic_")
            TOPICS.append(amps_topic)
            assert len(set(TOPICS)) == len(TOPICS)
        """
    )
    run(pytester).assert_outcomes(passed=2)


# --------------------------------------------------------------------------- fault proxy


def test_the_fault_proxy_stalls_and_cuts_between_client_and_server(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import pytest
        from ampsclient import Client
        from ampsclient_server_stub.testing import Inbox, wait_for

        def test_stall_then_cut(amps_server, amps_fault_proxy, amps_collector):
            assert amps_fault_proxy.uri().startswith(
                f"tcp://127.0.0.1:{amps_fault_proxy.port}/amps/json"
            )
            sub = amps_server.client("direct-subscriber")
            sub.subscribe(amps_collector, "orders")
            proxied = Client("through-the-proxy")
            proxied.connect(amps_fault_proxy.uri())
            proxied.logon(5000)
            assert amps_fault_proxy.open_connections == 1

            amps_fault_proxy.stall(30)
            proxied.publish("orders", '{"n": "held"}')
            amps_server.publish("orders", '{"n": "marker"}')  # direct, not through the proxy
            first = amps_collector.wait_for_count(1, timeout=10)
            assert [m.get_data() for m in first] == ['{"n": "marker"}']  # held is not through
            amps_fault_proxy.resume()
            both = amps_collector.wait_for_count(2, timeout=10)
            assert [m.get_data() for m in both][1] == '{"n": "held"}'

            assert amps_fault_proxy.cut() == 1
            wait_for(lambda: not proxied.connected, timeout=10, what="the client sees the cut")
            proxied.close()

        def test_factory_in_front_of_another_server(amps_server_factory, amps_fault_proxy_factory):
            server = amps_server_factory(message_types=["nvfix"], name="second")
            proxy = amps_fault_proxy_factory(server)
            assert proxy.uri().endswith("/amps/nvfix")
            client = Client("c")
            client.connect(proxy.uri("json"))
            client.logon(5000)
            client.close()
            assert proxy.connections == 1
        """
    )
    run(pytester).assert_outcomes(passed=2)


def test_the_fault_proxy_shapes_the_link_and_partitions_one_way(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import json
        from ampsclient import Client
        from ampsclient_server_stub.testing import wait_for

        def test_byte_by_byte_with_latency(
            amps_server, amps_fault_proxy_factory, amps_collector
        ):
            proxy = amps_fault_proxy_factory(amps_server, seed=7)
            sub = Client("subscriber-through-the-proxy")
            sub.connect(proxy.uri())
            sub.logon(5000)
            proxy.fragment(1, direction="to_client")  # every delivery cut byte by byte
            proxy.latency(0.005, jitter=0.002, direction="to_client")
            sub.subscribe(amps_collector, "orders")
            amps_server.publish_many("orders", [json.dumps({"n": n}) for n in range(20)])
            got = amps_collector.wait_for_count(20, timeout=20)
            assert [json.loads(m.get_data())["n"] for m in got] == list(range(20))
            sub.close()

        def test_a_one_way_partition_then_heal(amps_server, amps_fault_proxy, amps_collector):
            sub = Client("subscriber-through-the-proxy")
            sub.connect(amps_fault_proxy.uri())
            sub.logon(5000)
            sub.subscribe(amps_collector, "orders")
            amps_server.publish("orders", '{"n": 0}')
            amps_collector.wait_for_count(1, timeout=10)
            amps_fault_proxy.partition("to_client")
            amps_server.publish("orders", '{"n": 1}')  # dropped on the way to the client
            stats = amps_fault_proxy.stats["to_client"]
            wait_for(lambda: stats.dropped > 0, timeout=10, what="the delivery dropped")
            assert sub.connected  # half-open: nothing tells the client
            assert amps_fault_proxy.heal() == 1  # the connection with a gap is aborted
            wait_for(lambda: not sub.connected, timeout=10, what="the client sees the abort")
            assert [m.get_data() for m in amps_collector.snapshot()] == ['{"n": 0}']
            sub.close()
        """
    )
    run(pytester).assert_outcomes(passed=2)


# --------------------------------------------------------------------------- replicated pair


def test_the_replicated_pair_replicates_both_ways_and_survives_a_node(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        from ampsclient_server_stub.testing import read_log

        def test_pair(amps_replicated_pair):
            pair = amps_replicated_pair
            a_uri, b_uri = pair.uris()
            assert a_uri == pair.a.uri() and b_uri == pair.b.uri() and a_uri != b_uri
            from ampsclient import Client
            for uri, body in ((a_uri, '{"from": "A"}'), (b_uri, '{"from": "B"}')):
                with Client(f"pub-{body[10]}") as c:
                    c.connect(uri)
                    c.logon(5000)
                    c.publish("orders", body)
                    c.flush(5000)
            pair.wait_caught_up()
            for uri in (a_uri, b_uri):
                bodies = sorted(b for _, b in read_log(uri, "orders"))
                assert bodies == [b'{"from": "A"}', b'{"from": "B"}']
            pair.a.kill()
            assert not pair.a.running and pair.b.running
            pair.a.start()
            pair.wait_streaming()
        """
    )
    run(pytester).assert_outcomes(passed=1)


# --------------------------------------------------------------------------- log level


def test_log_level_option_applies_while_servers_run_then_is_restored(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import logging

        LOGGER = logging.getLogger("ampsclient_server_stub")

        def test_during(amps_server):
            assert LOGGER.level == logging.DEBUG

        def test_after():
            assert LOGGER.level == logging.NOTSET
        """
    )
    run(pytester, "--amps-server-log-level=debug").assert_outcomes(passed=2)
    result = run(pytester, "--amps-server-log-level=loud", "-k", "during")
    result.stdout.fnmatch_lines(["*--amps-server-log-level: unknown level 'loud'*"])


def test_without_the_option_logging_is_left_alone(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import logging

        def test_level(amps_server):
            assert logging.getLogger("ampsclient_server_stub").level == logging.NOTSET
        """
    )
    run(pytester).assert_outcomes(passed=1)


# --------------------------------------------------------------------------- no clash


def test_a_projects_own_fixture_of_the_same_name_wins(pytester: pytest.Pytester) -> None:
    """This project's own suite defines ``amps_server`` (tests/interop, tests/spark) and
    ``server``: local fixtures override a plugin's, so those tests are unchanged."""
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture
        def amps_server():
            return "the project's own"
        """
    )
    pytester.makepyfile(
        """
        def test_own(amps_server):
            assert amps_server == "the project's own"
        """
    )
    run(pytester).assert_outcomes(passed=1)


# --------------------------------------------------------------------------- collector


def test_wait_for_count_returns_every_item_or_names_what_came() -> None:
    inbox = Inbox()
    inbox("a")
    inbox("b")
    assert inbox.wait_for_count(2, timeout=1) == ["a", "b"]
    with pytest.raises(AssertionError, match=r"within 0\.05 s \(2 items"):
        inbox.wait_for_count(3, timeout=0.05)
