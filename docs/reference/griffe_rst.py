"""A griffe extension for the API reference: qcore's docstrings are plain prose with a
little reStructuredText in them, and the reference renders them as Markdown. This
turns the reStructuredText bits into their Markdown equivalents before rendering:

* roles such as :meth:`Boss.handler` or :class:`~qcore.job.Job` become code spans
  (``~`` keeps the last component only, as Sphinx shows it);
* a paragraph of doctest lines (``>>>`` / ``...``) becomes a fenced ``pycon`` block,
  instead of a nest of block quotes;
* a literal-block marker (a line ending in ``::``) becomes a plain colon, or goes
  away when it stands alone; the indented block after it is already Markdown code.

Only the text of docstrings changes; the code is not touched. Loaded by mkdocs.yml
(``plugins.mkdocstrings.handlers.python.options.extensions``); not part of the site.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:meth|func|class|attr|data|mod|exc|obj|const):`(~?)([^`]+)`")
_DOCTEST = re.compile(r"^(\s*)(>>>|\.\.\.)( |$)")


def _role(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2)
    if short:
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def convert(text: str) -> str:
    """The Markdown spelling of a docstring written with a little reStructuredText."""
    text = _ROLE.sub(_role, text)
    out: list[str] = []
    in_doctest = False
    for line in text.splitlines():
        doctest = _DOCTEST.match(line)
        if doctest and not in_doctest:
            out.append(f"{doctest.group(1)}```pycon")
            in_doctest = True
        elif in_doctest and not doctest:
            out.append(out[-1][: len(out[-1]) - len(out[-1].lstrip())] + "```")
            in_doctest = False
        if not in_doctest:
            stripped = line.rstrip()
            if stripped.strip() == "::":
                line = ""
            elif stripped.endswith("::") and not stripped.endswith(":::"):
                line = stripped[:-1]
        out.append(line)
    if in_doctest:
        out.append(out[-1][: len(out[-1]) - len(out[-1].lstrip())] + "```")
    return "\n".join(out)


class RstToMarkdown(griffe.Extension):
    """Rewrite each docstring once the whole package is loaded."""

    def __init__(self) -> None:
        super().__init__()
        self._done: set[int] = set()

    def on_object(self, *, obj: griffe.Object, loader: Any = None, **kwargs: Any) -> None:
        if obj.is_alias or obj.docstring is None or id(obj.docstring) in self._done:
            return
        self._done.add(id(obj.docstring))
        obj.docstring.value = convert(obj.docstring.value)
