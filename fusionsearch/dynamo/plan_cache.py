"""The on-disk plan cache of the torch.compile backend: the best plan found for a graph on a device, so that
a second process (or a second identical graph) loads it instead of searching again.

One JSON file per key; the key hashes what the plan depends on: the graph's signature (ops, shapes, dtypes,
strides), the device and the search settings. Files are written atomically and read back only when they hold
a plan for exactly that graph; anything else is treated as a miss and overwritten."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from fusionsearch.codegen.runtime import cache_root
from fusionsearch.errors import FusionSearchError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.plan import Plan

__all__ = ["PlanCache", "default_cache_dir"]

FORMAT = "fusionsearch-plan-cache-v1"
STEP_FORMAT = "fusionsearch-step-race-v1"


def default_cache_dir() -> str:
    """<codegen.runtime.cache_root>/plans, beside the generated kernels."""
    return os.path.join(cache_root(), "plans")


class PlanCache:
    """Plans by (graph signature, device, settings) in `directory`."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory or default_cache_dir()

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
            with open(self._path(key)) as f:
                record = json.load(f)
            if record.get("format") != FORMAT or record.get("graph") != g.signature_hash():
                return None
            return Plan.from_dict(record["plan"], g), record
        except (OSError, ValueError, KeyError, TypeError, AttributeError, FusionSearchError):
            return None

    def store(self, key: str, g: OpGraph, plan: Plan, best_us: float, extra: dict[str, Any] | None = None) -> str:
        """Write the plan atomically; returns the file's path."""
        return self._write(key, {"format": FORMAT, "graph": g.signature_hash(), "plan": plan.to_dict(),
                                 "best_us": best_us, **(extra or {})})

    def load_step(self, key: str, g: OpGraph) -> dict[str, Any] | None:
        """The step race stored for the whole graph `g` (dynamo/step_race.py), or None (none, damaged, another
        graph's)."""
        try:
            with open(self._path(key)) as f:
                record = json.load(f)
            if record.get("format") != STEP_FORMAT or record.get("graph") != g.signature_hash():
                return None
            step = record["step"]
            return step if isinstance(step, dict) else None
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def store_step(self, key: str, g: OpGraph, step: dict[str, Any]) -> str:
        """Write the step race of the whole graph `g` atomically; returns the file's path."""
        return self._write(key, {"format": STEP_FORMAT, "graph": g.signature_hash(), "step": step})

    def _write(self, key: str, record: dict[str, Any]) -> str:
        os.makedirs(self.directory, exist_ok=True)
        path = self._path(key)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(record, f, indent=1)
        os.replace(tmp, path)
        return path
