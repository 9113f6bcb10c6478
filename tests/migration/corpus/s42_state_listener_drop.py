"""Connection state listener on a dropped connection: reported twice (again after a
disconnect handler that does not reconnect), once more per send that finds it down, then
True twice for a reconnect."""

import os
import sys
import threading

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

states = []
client = AMPS.Client("corpus-s42")
client.add_connection_state_listener(lambda state: states.append(bool(state)))
handled = threading.Event()
client.set_disconnect_handler(lambda c: handled.set())
client.connect(uri)
client.logon()
del states[:]
intruder = AMPS.Client("corpus-s42")
intruder.connect(uri)
intruder.logon()
handled.wait(10)
for _ in range(30):  # the second report follows the handler
    if len(states) >= 2:
        break
    handled.wait(0.1)
print("drop", states)
del states[:]
try:
    client.publish("s42-topic", "{}")
except AMPS.DisconnectedException:
    print("publish", states)
del states[:]
intruder.close()
client.connect(uri)
client.logon()
print("reconnect", states)
client.close()
