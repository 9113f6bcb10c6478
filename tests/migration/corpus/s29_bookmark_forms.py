"""Bookmark forms: EPOCH replays the journal, NOW only what comes next, a message's own
bookmark resumes after it; the bookmarks of a replay are distinct."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

client = AMPS.Client("corpus-s29")
client.connect(uri)
client.logon()
for n in range(5):
    client.publish("s29-topic", json.dumps({"n": n}))
client.flush()


def read(stream, count):
    out = []
    for message in stream.timeout(5000):
        if message is None:
            break
        if message.get_command() in ("p", "publish"):
            out.append((json.loads(message.get_data())["n"], message.get_bookmark()))
            if len(out) == count:
                break
    stream.close()
    return out


replay = read(client.bookmark_subscribe("s29-topic", AMPS.Client.Bookmarks.EPOCH, timeout=5000), 5)
print("epoch", [n for n, _ in replay])
print("bookmarks distinct", len({b for _, b in replay}) == 5)
resume = read(client.bookmark_subscribe("s29-topic", replay[2][1], timeout=5000), 2)
print("after the third", [n for n, _ in resume])
stream = client.bookmark_subscribe("s29-topic", AMPS.Client.Bookmarks.NOW, timeout=5000)
client.publish("s29-topic", json.dumps({"n": 5}))
print("now", [n for n, _ in read(stream, 1)])
print(
    "constants",
    AMPS.Client.Bookmarks.EPOCH,
    AMPS.Client.Bookmarks.NOW,
    AMPS.Client.Bookmarks.MOST_RECENT,
)
client.close()
