"""The on-disk plan cache of the torch.compile backend: the best plan found for a graph on a device, so that
a second process (or a second identical graph) loads it instead of searching again.

One JSON file per key; the key hashes what the plan depends on: the graph's signature (ops, shapes, dtypes,
strides), the device and the search settings. Files are written atomically and read back only when they hold
a plan for exactly that graph, down to their values; anything else (another format, a `best_us` that is not a
time, JSON nested past reading, a directory or a FIFO where the file goes) is a damaged entry: it warns once,
reads as a miss, and the new result overwrites it. Only regular files are read, opened without blocking, so no
special file can hang a compile."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import stat
import threading
import warnings
from typing import Any

from fusionsearch.codegen.runtime import cache_root
from fusionsearch.errors import FusionSearchError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.plan import Plan

__all__ = ["PlanCache", "default_cache_dir"]

FORMAT = "fusionsearch-plan-cache-v1"
STEP_FORMAT = "fusionsearch-step-race-v1"
MAX_ENTRY_BYTES = 16 << 20  # a plan of a 10,000-op graph takes about 2 MB; a larger entry is damaged


class DamagedEntry(Exception):  # noqa: N818 - internal: caught where an entry is read, never raised to a user
    """Why a cache entry cannot be used."""


def default_cache_dir() -> str:
    """<codegen.runtime.cache_root>/plans, beside the generated kernels."""
    return os.path.join(cache_root(), "plans")


class PlanCache:
    """Plans by (graph signature, device, settings) in `directory`."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory or default_cache_dir()
        self._warned: set[str] = set()  # damaged entries already named: one warning each

    def key(self, g: OpGraph, device: str, settings: dict[str, Any]) -> str:
        text = json.dumps({"graph": g.signature_hash(), "device": device, "settings": settings}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, f"{key}.json")

    def load(self, key: str, g: OpGraph) -> Plan | None:
        """The cached plan for `g`, or None when there is none (or the entry is unreadable or for another graph)."""
        entry = self.load_entry(key, g)
        return None if entry is None else entry[0]

    def load_entry(self, key: str, g: OpGraph) -> tuple[Plan, dict[str, Any]] | None:
        """The cached plan for `g` with the whole record it was stored with (best_us, the race against
        Inductor, ...), or None as `load`."""
        try:
            record = self._record(key, FORMAT, g)
            if record is None:
                return None
            best = record.get("best_us")
            if best is not None and (isinstance(best, bool) or not isinstance(best, int | float)
                                     or not (math.isnan(best) or 0 < best < math.inf)):
                raise DamagedEntry(f"its best_us {best!r:.40} is not a time in us")
            if not isinstance(record.get("race"), dict | None):
                raise DamagedEntry("its race is not a record")
            try:
                return Plan.from_dict(record["plan"], g), record
            except (KeyError, TypeError, ValueError, AttributeError, RecursionError, FusionSearchError) as e:
                raise DamagedEntry(f"its plan does not load ({type(e).__name__})") from None
        except DamagedEntry as e:
            self._warn(key, f"{e}; the region is searched again and the entry overwritten")
            return None

    def store(self, key: str, g: OpGraph, plan: Plan, best_us: float, extra: dict[str, Any] | None = None) -> str:
        """Write the plan atomically; returns the file's path."""
        return self._write(key, {"format": FORMAT, "graph": g.signature_hash(), "plan": plan.to_dict(),
                                 "best_us": best_us, **(extra or {})})

    def load_step(self, key: str, g: OpGraph) -> dict[str, Any] | None:
        """The step race stored for the whole graph `g` (dynamo/step_race.py), or None (none, damaged, another
        graph's)."""
        try:
            record = self._record(key, STEP_FORMAT, g)
            if record is not None and not isinstance(record.get("step"), dict):
                raise DamagedEntry("its step is not a record")
            return None if record is None else record["step"]
        except DamagedEntry as e:
            self._warn(key, f"{e}; the step is raced again and the entry overwritten")
            return None

    def _record(self, key: str, form: str, g: OpGraph) -> dict[str, Any] | None:
        """The JSON record of entry `key`, one of format `form` for graph `g`; None when there is no entry;
        DamagedEntry when there is one that is not such a record. Opened without blocking (a FIFO would wait
        for a writer) and read only when it is a regular file of at most MAX_ENTRY_BYTES."""
        try:
            fd = os.open(self._path(key), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise DamagedEntry(f"it cannot be opened ({e.strerror})") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise DamagedEntry("it is not a regular file (a directory, a FIFO or a device)")
            if info.st_size > MAX_ENTRY_BYTES:
                raise DamagedEntry(f"it holds {info.st_size} bytes, over the {MAX_ENTRY_BYTES} an entry may")
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read(MAX_ENTRY_BYTES + 1)
        except OSError as e:
            raise DamagedEntry(f"it cannot be read ({e.strerror})") from None
        finally:
            os.close(fd)
        try:
            record = json.loads(data)
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
            raise DamagedEntry(f"it is not JSON that can be read ({type(e).__name__})") from None
        if not isinstance(record, dict) or record.get("format") != form:
            raise DamagedEntry(f"it is not a {form} record")
        if record.get("graph") != g.signature_hash():
            raise DamagedEntry("it is the record of another graph")
        return record

    def _warn(self, key: str, what: str) -> None:
        path = self._path(key)
        if path not in self._warned:
            self._warned.add(path)
            warnings.warn(f"plan cache entry {path} is damaged: {what}", stacklevel=3)

    def store_step(self, key: str, g: OpGraph, step: dict[str, Any]) -> str:
        """Write the step race of the whole graph `g` atomically; returns the file's path."""
        return self._write(key, {"format": STEP_FORMAT, "graph": g.signature_hash(), "step": step})

    def _write(self, key: str, record: dict[str, Any]) -> str:
        """Write `record` as entry `key` through a temporary file beside it (one per writer, removed whatever
        happens), replacing whatever is there: a damaged entry's directory goes too (a symlink is replaced, not
        followed)."""
        os.makedirs(self.directory, exist_ok=True)
        path = self._path(key)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(record, f, indent=1)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self._warned.discard(path)
        return path
