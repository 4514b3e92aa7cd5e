"""Source assembly: indented lines and generated identifiers (no user string ever becomes code)."""

from __future__ import annotations

from collections.abc import Iterable


class Source:
    """Lines of Python source at an indentation level, with fresh names drawn from one counter."""

    def __init__(self, indent: int = 0, names: NameGen | None = None) -> None:
        self.lines: list[str] = []
        self.indent = indent
        self.names = names or NameGen()

    def line(self, text: str = "") -> None:
        self.lines.append(("    " * self.indent + text) if text else "")

    def extend(self, lines: Iterable[str]) -> None:
        for text in lines:
            self.line(text)

    def child(self, extra_indent: int = 0) -> Source:
        """A new block sharing the name counter, to be spliced in later."""
        return Source(self.indent + extra_indent, self.names)

    def splice(self, other: Source) -> None:
        self.lines.extend(other.lines)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class NameGen:
    """Fresh identifiers `prefix` + counter: generated, never taken from graph node names."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def fresh(self, prefix: str) -> str:
        n = self.counts.get(prefix, 0)
        self.counts[prefix] = n + 1
        return f"{prefix}{n}"
