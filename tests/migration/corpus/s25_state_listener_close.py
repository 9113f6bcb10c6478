"""Handlers and listeners: the connection state listener's True/False sequence for connect,
logon, disconnect and close (connected or not)."""

import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

states = []


def step(label):
    print(label, states)
    del states[:]


never = AMPS.Client("corpus-s25-never")
never.add_connection_state_listener(lambda state: states.append(bool(state)))
never.close()
step("close never connected")
client = AMPS.Client("corpus-s25")
client.add_connection_state_listener(lambda state: states.append(bool(state)))
client.connect(uri)
step("connect")
client.logon()
step("logon")
client.disconnect()
step("disconnect")
client.disconnect()
step("disconnect again")
client.connect(uri)
client.logon()
del states[:]
client.close()
step("close")
client.close()
step("close again")
