# ruff: noqa: E402, UP031 - an official-style script: the module is chosen before other imports
"""Exception handling: the official exception classes for common failures."""

import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]
import socket

client = AMPS.Client("corpus-s15")
try:
    client.publish("t", "{}")
    print("publish_before_connect", "no error")
except AMPS.DisconnectedException:
    print("publish_before_connect", "DisconnectedException")

sock = socket.socket()
sock.bind(("127.0.0.1", 0))
port = sock.getsockname()[1]
sock.close()
try:
    client.connect("tcp://127.0.0.1:%d/amps/json" % port)
    print("connect_dead", "no error")
except AMPS.ConnectionException:
    print("connect_dead", "ConnectionException")

try:
    client.connect("bogus://127.0.0.1:1/amps/json")
    print("bad_uri", "no error")
except AMPS.AMPSException as exc:
    print("bad_uri", isinstance(exc, AMPS.ConnectionException))

client.connect(uri)
client.logon()
try:
    client.subscribe(lambda m: None, "t", "((((", timeout=5000)
    print("bad_filter", "no error")
except AMPS.BadFilterException as exc:
    print("bad_filter", "BadFilterException", isinstance(exc, AMPS.CommandException))
try:
    client.sow(lambda m: None, "/ADMIN/bookmark_store", "/x = ", timeout=5000)
    print("bad_sow_filter", "no error")
except AMPS.CommandException:
    print("bad_sow_filter", "CommandException")
client.close()
