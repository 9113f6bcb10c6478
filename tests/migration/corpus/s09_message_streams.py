"""Message streams: iteration, timeout (None when idle), max_depth, get_depth, close."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]
client = AMPS.Client("corpus-s09")
client.connect(uri)
client.logon()
client.set_default_max_depth(100)
print("default_max_depth", client.get_default_max_depth())
stream = client.subscribe("s09-topic", timeout=5000)
stream.timeout(100)
first = next(iter(stream))
print("idle", first is None)
for n in range(5):
    client.publish("s09-topic", json.dumps({"n": n}))
client.flush(5000)
got = []
for message in stream:
    if message is None:
        break
    got.append(json.loads(message.get_data())["n"])
print("got", got)
limited = client.subscribe("s09-other", timeout=5000).max_depth(3)
print("max_depth", limited.get_max_depth())
stream.close()
limited.close()
client.close()
