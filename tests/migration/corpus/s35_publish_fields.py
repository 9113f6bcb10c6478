"""Publishing: expiration, correlation id and the delivered message's fields."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

client = AMPS.Client("corpus-s35")
client.connect(uri)
client.logon()
stream = client.subscribe("s35-topic", timeout=5000)
client.publish("s35-topic", json.dumps({"n": 1}), correlation_id="corr-1")
client.publish("s35-topic", json.dumps({"n": 2}), expiration=30)
client.publish("s35-topic", b'{"n": 3}')
got = []
for message in stream.timeout(5000):
    if message is None:
        break
    got.append((json.loads(message.get_data())["n"], message.get_correlation_id() or None))
    if len(got) == 3:
        break
stream.close()
print("got", got)
client.close()
