"""A griffe extension for the API reference: Sphinx roles in docstrings become code.

The docstrings cross-reference with Sphinx roles (``:class:`~ampsclient.sync.Client```,
``:meth:`publish```), which Markdown would show as written. This turns each into inline code
with the name as the reader sees it (the last component when the target starts with ``~``).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|data|exc|obj|const):`(~?)([^`]+)`")


def _code(match: re.Match[str]) -> str:
    target = match.group(2).strip()
    if "<" in target and target.endswith(">"):  # :class:`text <target>`
        return f"`{target.split('<', 1)[0].strip()}`"
    if match.group(1):
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_code, obj.docstring.value)
