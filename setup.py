"""Build the optional C speedups (``ampsclient/_speedups.c``).

Everything else is in ``pyproject.toml``. The extension is optional, as websockets' is:
without a C compiler the install succeeds and the pure-Python code runs
(``ampsclient._accel.SPEEDUPS`` is then ``False``).
"""

import os

from setuptools import Extension, setup

ext_modules = []
if os.environ.get("AMPSCLIENT_NO_EXTENSIONS") != "1":
    ext_modules.append(
        Extension("ampsclient._speedups", sources=["ampsclient/_speedups.c"], optional=True)
    )

setup(ext_modules=ext_modules)
