# ruff: noqa: E402, UP031 - an official-style script: the module is chosen before other imports
"""Server chooser and delay strategies: fail over from a dead server; give up when all are dead."""

import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]
import socket

dead = socket.socket()
dead.bind(("127.0.0.1", 0))
dead_port = dead.getsockname()[1]
dead.close()  # nothing listens there now
dead_uri = "tcp://127.0.0.1:%d/amps/json" % dead_port

client = AMPS.HAClient("corpus-s10")
chooser = AMPS.DefaultServerChooser()
chooser.add(dead_uri)
chooser.add(uri)
client.set_server_chooser(chooser)
client.set_reconnect_delay_strategy(AMPS.ExponentialDelayStrategy(10, 100, 2.0, 5000, 0.0))
client.connect_and_logon()
print("connected_to_live", chooser.get_current_uri() == uri)
client.close()

strategy = AMPS.FixedDelayStrategy(20, 300)
print("fixed_first_wait", strategy.get_connect_wait_duration(dead_uri))
lonely = AMPS.HAClient("corpus-s10-lonely")
only_dead = AMPS.DefaultServerChooser()
only_dead.add(dead_uri)
lonely.set_server_chooser(only_dead)
lonely.set_reconnect_delay_strategy(AMPS.FixedDelayStrategy(20, 300))
try:
    lonely.connect_and_logon()
    print("gave_up", False)
except AMPS.ConnectionException:
    print("gave_up", True)
