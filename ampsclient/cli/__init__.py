"""The ``ampsclient`` command: publish, subscribe, query and replay from a shell.

``ampsclient publish|subscribe|sow|sow_and_subscribe|sow_delete|ping|replay [options]``, also
``python -m ampsclient``. Every command connects through the HA client, so several
``--server`` options fail over. See ``docs/cli.md``; exit statuses are in :class:`ExitCode`.
"""

from .exit_codes import ExitCode
from .main import main

__all__ = ["ExitCode", "main"]
