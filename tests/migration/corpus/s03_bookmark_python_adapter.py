"""Bookmark subscriber resuming through MemoryBookmarkStore(adapter) with an application-written
recovery point adapter (the duck-typed next/update/purge/close/prune interface)."""

import json
import os
import sys
import threading
import time

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]
SUB = "s03-sub"


class FileAdapter:
    """Keeps the latest recovery point of each subscription in a JSON file."""

    def __init__(self, path):
        self.path = path
        self.points = {}
        if os.path.exists(path):
            with open(path) as f:
                self.points = json.load(f)
        self.pending = list(self.points.items())

    def next(self):
        if not self.pending:
            return AMPS.RecoveryPoint()  # the empty point: no more
        sub_id, bookmark = self.pending.pop()
        return AMPS.RecoveryPoint(sub_id, bookmark)

    def update(self, point):
        self.points[point.get_sub_id()] = point.get_bookmark()
        with open(self.path, "w") as f:
            json.dump(self.points, f)

    def purge(self, sub_id=None):
        if sub_id is None:
            self.points.clear()
        else:
            self.points.pop(sub_id, None)

    def close(self):
        pass

    def prune(self):
        pass


def make_store():
    return AMPS.MemoryBookmarkStore(FileAdapter(os.path.join(workdir, "points.json")))


publisher = AMPS.Client("corpus-s03-pub")
publisher.connect(uri)
publisher.logon()
for n in range(10):
    publisher.publish("s03-journal", json.dumps({"n": n}))
publisher.flush(5000)


def session(stop_after):
    """Subscribe from the recovery point; discard up to stop_after messages; return them."""
    client = AMPS.HAClient("corpus-s03-sub")
    client.set_bookmark_store(make_store())
    chooser = AMPS.DefaultServerChooser()
    chooser.add(uri)
    client.set_server_chooser(chooser)
    client.connect_and_logon()
    seen = []
    done = threading.Event()

    last = [None]

    def on_message(message):
        n = json.loads(message.get_data())["n"]
        if len(seen) < stop_after:
            seen.append(n)
            last[0] = message.get_bookmark()
            client.discard(message)
        if len(seen) == stop_after or n == 9:
            done.set()

    client.bookmark_subscribe(
        on_message, "s03-journal", AMPS.Client.Bookmarks.MOST_RECENT, sub_id="s03-sub", timeout=5000
    )
    done.wait(10)
    # the recovery point moves once the server's persisted ack covers the discarded messages
    deadline = time.time() + 10
    while time.time() < deadline and client.get_most_recent(SUB) != last[0]:
        time.sleep(0.05)
    client.unsubscribe("s03-sub")
    client.close()
    return seen


print("first", session(6))
print("second", session(10))
publisher.close()
