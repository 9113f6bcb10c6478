"""retry_on_disconnect (default True): after the server drops the connection (another
logon with the same name), a publish calls the disconnect handler again; the handler
reconnects on that second call and the publish goes out. With False it raises."""

import os
import sys
import threading

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

for retry in (True, False):
    name = f"corpus-s41-{retry}"
    client = AMPS.Client(name)
    print("default", client.get_retry_on_disconnect())
    client.set_retry_on_disconnect(retry)
    calls = []
    first = threading.Event()

    def on_disconnect(c, calls=calls, first=first):
        calls.append(len(calls) + 1)
        if len(calls) == 2:
            c.connect(uri)
            c.logon()
        first.set()

    client.set_disconnect_handler(on_disconnect)
    client.connect(uri)
    client.logon()
    intruder = AMPS.Client(name)
    intruder.connect(uri)
    intruder.logon()  # the server drops the first connection
    first.wait(10)
    intruder.close()
    try:
        client.publish("s41-topic", "{}")
        client.flush(5000)
        print(retry, "publish went out, handler calls", calls)
    except AMPS.DisconnectedException:
        print(retry, "DisconnectedException, handler calls", calls)
    client.close()
