"""Build the optional C speedups (``ampsclient/_speedups.c`` for the client,
``ampsclient_server_stub/_speedups.c`` and ``ampsclient_server_stub/queues/_queue_speedups.c``
for the reference server, ``ampsclient/spark/_json_speedups.c`` for the Spark source's
``parse=json``). ``python -m build`` makes the sdist and the wheel: docs/release.md.

Everything else is in ``pyproject.toml``. The extensions are optional, as websockets' is:
without a C compiler the install succeeds and the pure-Python code runs
(``ampsclient._accel.SPEEDUPS``, ``ampsclient_server_stub.accel.SPEEDUPS`` and
``ampsclient_server_stub.queues.speedups.SPEEDUPS`` are then ``False``, and
``ampsclient.spark._jsonfields.json_fields`` is ``None``: ``parse=json`` reads row by row).
``AMPSCLIENT_NO_EXTENSIONS=1`` skips them on purpose.
"""

import os

from setuptools import Extension, setup

ext_modules = []
if os.environ.get("AMPSCLIENT_NO_EXTENSIONS") != "1":
    ext_modules.append(
        Extension("ampsclient._speedups", sources=["ampsclient/_speedups.c"], optional=True)
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
