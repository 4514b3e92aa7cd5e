"""Where results may be written: a directory written whole (a new or an empty one) in a place files can be
created. The CLI's --out and the API's export (codegen.runtime.export_plan, TuneResult.export) refuse the same
paths with the same one line, before anything is written: a file, a symbolic link, a directory holding other
files (whose plan.json would be silently replaced), a place no file can be created in."""

from __future__ import annotations

import os
import tempfile

from fusionsearch.errors import SpecError


def check_writable_place(path: str, what: str) -> None:
    """Refuse a path whose nearest existing folder is not a folder this process can create files in (probed by
    creating one: permissions alone do not tell for root, read-only mounts or /proc). `what` names the path in
    the refusal ("--out", "export directory")."""
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise SpecError(f"{what} {path!r}: {parent!r} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".fusionsearch-probe-", dir=parent))
    except OSError as e:
        raise SpecError(f"{what} {path!r} cannot be written: no file can be created in {parent!r} "
                        f"({e.strerror})") from None


def check_out_dir(path: str, what: str) -> None:
    """A directory to be written whole: a new one, or an empty one, in a place that can be written."""
    if not isinstance(path, str | os.PathLike):
        raise SpecError(f"{what} must be a path, got {type(path).__name__}")
    path = os.fspath(path)
    if os.path.islink(path):
        raise SpecError(f"{what} {path!r} is a symbolic link (to {os.readlink(path)!r}); name the directory itself")
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise SpecError(f"{what} {path!r} is a file, not a directory; choose a new directory")
        if os.listdir(path):
            raise SpecError(f"{what} {path!r} exists and is not empty; choose a new directory")
    check_writable_place(path, what)
