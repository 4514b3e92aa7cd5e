"""The GPUs a learned model was trained on, as its file records them: one GPU's record (its name, profile and
software), or a pooled model's (`gpus`: every GPU's name; `profiles`: each one's profile). A search's default
model is one trained on its device (learned.load_default), so this record decides which GPUs a file serves."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fusionsearch.costmodel.analytic import check_hardware
from fusionsearch.costmodel.hardware import Hardware
from fusionsearch.errors import CostModelError

__all__ = ["checked_hardware", "gpu_name", "hardware_record", "trained_on"]


def gpu_name(row: Mapping[str, Any]) -> str:
    """The GPU a measured row was timed on: the collector's `device`, else its profile's name ("unknown GPU")."""
    hw = row.get("hardware")
    if not isinstance(hw, dict):
        return "unknown GPU"
    profile = hw.get("profile") if isinstance(hw.get("profile"), dict) else {}
    return str(hw.get("name") or hw.get("device") or profile.get("name") or "unknown GPU")


def hardware_record(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The hardware record of a model trained on `rows`: None when no row names a GPU; the row's record (with
    `name`) when they were all measured on one; else a pooled record naming each GPU and its profile."""
    records: dict[str, dict[str, Any]] = {}
    for r in rows:
        if isinstance(r.get("hardware"), dict):
            records.setdefault(gpu_name(r), {**r["hardware"], "name": gpu_name(r)})
    if len(records) <= 1:
        return next(iter(records.values()), None)
    names = sorted(records)
    return {"name": " + ".join(names), "gpus": names,
            "profiles": {n: records[n]["profile"] for n in names if isinstance(records[n].get("profile"), dict)}}


def trained_on(model: Any) -> list[str]:
    """The names of the GPUs a model's training rows were measured on: the one its hardware record names, or
    each of a pooled model's (`gpus`)."""
    record = getattr(model, "hardware_", None) or {}
    gpus = record.get("gpus")
    if isinstance(gpus, list):
        return [str(g) for g in gpus]
    return [record["name"]] if isinstance(record.get("name"), str) else []


def checked_hardware(path: str, record: Any) -> dict[str, Any] | None:
    """A file's hardware record: None, or a record with a name whose profiles (`profile`, each of `profiles`),
    where it has them, are usable (every figure finite and positive), and whose `gpus` are names."""
    if record is None:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("name"), str):
        raise CostModelError(f"{path}: its hardware record is not a record with a GPU name")
    gpus, profiles = record.get("gpus"), record.get("profiles", {})
    if gpus is not None and not (isinstance(gpus, list) and gpus and all(isinstance(g, str) for g in gpus)):
        raise CostModelError(f"{path}: its hardware record's gpus is not a list of GPU names")
    if not isinstance(profiles, dict):
        raise CostModelError(f"{path}: its hardware record's profiles is not a record of profiles by GPU")
    for profile in [record.get("profile"), *profiles.values()]:
        if profile is None:
            continue
        try:
            check_hardware(Hardware.from_dict(profile))
        except (ValueError, CostModelError) as e:
            raise CostModelError(f"{path}: its hardware profile is refused: {e}") from None
    return dict(record)
