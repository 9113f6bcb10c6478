"""Client identity and settings: names, server version, heartbeats, default max depth,
logon correlation data."""

import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

client = AMPS.Client("corpus-s40")
print("name", client.get_name())
client.connect(uri)
client.logon()
client.set_heartbeat(5)  # after logon: the official client sends the heartbeat command at once
print("uri", client.get_uri() == uri)
print("server version is a number", isinstance(client.get_server_version(), int))
print("version info", type(client.get_server_version_info()).__name__ in ("str", "VersionInfo"))
client.set_default_max_depth(7)
print("default max depth", client.get_default_max_depth())
print("retry_on_disconnect", client.get_retry_on_disconnect() in (True, False))
client.publish("s40-topic", "{}")
client.flush(5000)
client.close()
