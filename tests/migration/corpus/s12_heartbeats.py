# ruff: noqa: E402 - an official-style script: the module is chosen before other imports
"""Heartbeats: the client starts them at logon, answers the server, stays connected."""

import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]
import threading

beats = threading.Event()
client = AMPS.Client("corpus-s12")
client.set_heartbeat(1)
client.set_global_command_type_message_handler("heartbeat", lambda m: beats.set())
client.connect(uri)
client.logon()
print("beat_seen", beats.wait(5))
client.publish("s12-topic", "{}")
client.flush(5000)
print("still_connected", True)
client.close()
