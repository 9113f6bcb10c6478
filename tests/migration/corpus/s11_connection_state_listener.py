"""Connection state listener: connected, then disconnected on close."""

import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]
states = []
client = AMPS.Client("corpus-s11")
client.add_connection_state_listener(lambda state: states.append(bool(state)))
client.connect(uri)
client.logon()
print("after_logon", bool(states) and states[-1])
client.publish("s11-topic", "{}")
client.flush(5000)
client.disconnect()
print("after_disconnect", states[-1])
