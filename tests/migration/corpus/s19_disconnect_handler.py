"""A one-argument disconnect handler (the official DisconnectHandler) runs when the server
drops the connection (another client logged on with the same name) and may reconnect."""

import os
import sys
import threading

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

client = AMPS.Client("corpus-s19")
calls = []
reconnected = threading.Event()


def on_disconnect(c):
    calls.append(c is client)
    c.connect(uri)
    c.logon()
    reconnected.set()


client.set_disconnect_handler(on_disconnect)
client.connect(uri)
client.logon()
intruder = AMPS.Client("corpus-s19")  # same name: the server drops the first connection
intruder.connect(uri)
intruder.logon()
print("handler ran and reconnected", reconnected.wait(10))
print("calls", calls[:1])
intruder.close()
stream = client.subscribe("s19-topic", timeout=5000)
client.publish("s19-topic", '{"ok":1}')
print("works after reconnect", next(iter(stream.timeout(5000))).get_data())
stream.close()
client.close()
