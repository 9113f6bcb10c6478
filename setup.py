"""Build the optional C speedups (``ampsclient/_speedups_src/*.c`` for the client: one file per
concept, compiled into the one module ``ampsclient._speedups``, with their shared declarations in
``ampsclient/_speedups_src/speedups.h``; ``ampsclient_server_stub/_speedups.c`` and
``ampsclient_server_stub/queues/_queue_speedups.c`` for the reference server,
``ampsclient/spark/_json_speedups.c`` for the Spark source's ``parse=json``). ``python -m build``
makes the sdist and the wheel: docs/release.md.

Everything else is in ``pyproject.toml``. The extensions are optional, as websockets' is:
without a C compiler the install succeeds and the pure-Python code runs
(``ampsclient._accel.SPEEDUPS``, ``ampsclient_server_stub.accel.SPEEDUPS`` and
``ampsclient_server_stub.queues.speedups.SPEEDUPS`` are then ``False``, and
``ampsclient.spark._jsonfields.json_fields`` is ``None``: ``parse=json`` reads row by row).
``AMPSCLIENT_NO_EXTENSIONS=1`` skips them on purpose.
"""

import glob
import os

from setuptools import Extension, setup

# the client's C speedups: every .c of the directory is a part of the one module (its header is
# a dependency: a change rebuilds it; MANIFEST.in puts it in the sdist)
SPEEDUPS_SRC = "ampsclient/_speedups_src"

ext_modules = []
if os.environ.get("AMPSCLIENT_NO_EXTENSIONS") != "1":
    ext_modules.append(
        Extension(
            "ampsclient._speedups",
            sources=sorted(glob.glob(f"{SPEEDUPS_SRC}/*.c")),
            depends=sorted(glob.glob(f"{SPEEDUPS_SRC}/*.h")),
            optional=True,
        )
    )
    ext_modules.append(
        Extension(
            "ampsclient_server_stub._speedups",
            sources=["ampsclient_server_stub/_speedups.c"],
            libraries=["z"],
            optional=True,
        )
    )
    ext_modules.append(
        Extension(
            "ampsclient_server_stub.queues._queue_speedups",
            sources=["ampsclient_server_stub/queues/_queue_speedups.c"],
            optional=True,
        )
    )
    ext_modules.append(
        Extension(
            "ampsclient.spark._json_speedups",
            sources=["ampsclient/spark/_json_speedups.c"],
            optional=True,
        )
    )

setup(ext_modules=ext_modules)
