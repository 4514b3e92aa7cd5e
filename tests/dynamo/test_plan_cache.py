"""The backend's plan cache reads its entries down to their values (issue 53, items 12 and 18): a damaged entry
(a `best_us` that is not a time, JSON nested past reading, a directory or a FIFO where the file goes) is one
warning and a miss, never a traceback or a hang; the next store repairs it and leaves no temporary file."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from deadline import deadline

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.dynamo.plan_cache import PlanCache
from fusionsearch.dynamo.race import RegionChoice


@pytest.fixture
def stored(tmp_path: Path) -> tuple[PlanCache, str, fs.OpGraph, P.Plan]:
    """A cache holding one good entry: the cache, its key, the graph and the plan."""
    g = fs.workload("mm_bias_gelu", M=16, K=32, N=32, dtype=torch.float32)
    cache = PlanCache(str(tmp_path / "plans"))
    key = cache.key(g, "cpu-interpreter", {"trials": 3})
    plan = P.heuristic(g)
    cache.store(key, g, plan, 12.5, {"race": None})
    return cache, key, g, plan


def _edit_record(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        record = json.loads(path.read_text())
        change(record)
        path.write_text(json.dumps(record))
    return damage


def _replace_with(make: Callable[[Path], None]) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        path.unlink()
        make(path)
    return damage


def _directory(path: Path) -> None:
    path.mkdir()
    (path / "inside").write_text("x")


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "best_us text": (_edit_record(lambda r: r.update(best_us="abc")), "its best_us 'abc' is not a time in us"),
    "best_us bool": (_edit_record(lambda r: r.update(best_us=True)), "its best_us True is not a time"),
    "best_us negative": (_edit_record(lambda r: r.update(best_us=-3.0)), "its best_us -3.0 is not a time"),
    "best_us list": (_edit_record(lambda r: r.update(best_us=[1.0])), "its best_us [1.0] is not a time"),
    "race text": (_edit_record(lambda r: r.update(race="fast")), "its race is not a record"),
    "plan garbage": (_edit_record(lambda r: r.update(plan={"kernels": 7})), "its plan does not load"),
    "another graph": (_edit_record(lambda r: r.update(graph="0" * 16)), "the record of another graph"),
    "deep JSON": (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), "not JSON that can be read"),
    "not UTF-8": (lambda p: p.write_bytes(b"\xff\xfe{"), "not JSON that can be read"),
    "a list": (lambda p: p.write_text("[1, 2]"), "not a fusionsearch-plan-cache-v1 record"),
    "directory": (_replace_with(_directory), "not a regular file"),
    "FIFO": (_replace_with(os.mkfifo), "not a regular file"),
    "device": (_replace_with(lambda p: p.symlink_to("/dev/zero")), "not a regular file"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_entry_is_one_warning_and_a_miss_and_the_next_store_repairs_it(
        stored: tuple[PlanCache, str, fs.OpGraph, P.Plan], case: str) -> None:
    cache, key, g, plan = stored
    path = Path(cache.directory) / f"{key}.json"
    damage, why = DAMAGE[case]
    damage(path)
    with deadline(10), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert cache.load_entry(key, g) is None
        assert cache.load(key, g) is None  # asked again (the backend's bar, then its region): no second warning
    assert len(seen) == 1 and f"plan cache entry {path} is damaged: " in str(seen[0].message), \
        [str(w.message) for w in seen]
    assert why in str(seen[0].message)
    cache.store(key, g, plan, 7.0)
    assert path.is_file() and not path.is_symlink()
    assert cache.load_entry(key, g) == (plan, json.loads(path.read_text()))
    assert os.listdir(cache.directory) == [path.name]  # no temporary file left beside it


def test_a_store_that_fails_leaves_no_temporary_file(stored: tuple[PlanCache, str, fs.OpGraph, P.Plan]) -> None:
    cache, key, g, plan = stored
    with pytest.raises(ValueError, match="Circular reference"):
        loop: dict[str, Any] = {}
        loop["self"] = loop
        cache.store(key, g, plan, 7.0, {"loop": loop})
    assert os.listdir(cache.directory) == [f"{key}.json"]
    assert cache.load_entry(key, g) is not None  # the old entry stands


def test_a_good_entry_loads_without_a_warning_and_nan_is_an_unknown_time(
        stored: tuple[PlanCache, str, fs.OpGraph, P.Plan]) -> None:
    cache, key, g, plan = stored
    cache.store(key, g, plan, float("nan"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        entry = cache.load_entry(key, g)
    assert entry is not None and entry[0] == plan and entry[1]["best_us"] != entry[1]["best_us"]


def test_a_damaged_step_race_entry_is_a_miss_with_one_warning(tmp_path: Path) -> None:
    g = fs.workload("mm_bias_gelu", M=16, K=32, N=32, dtype=torch.float32)
    cache = PlanCache(str(tmp_path))
    key = cache.key(g, "cuda", {"step": True})
    cache.store_step(key, g, {"chosen": "inductor"})
    assert cache.load_step(key, g) == {"chosen": "inductor"}
    Path(tmp_path, f"{key}.json").write_text(json.dumps({"format": "fusionsearch-step-race-v1",
                                                         "graph": g.signature_hash(), "step": "abc"}))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert cache.load_step(key, g) is None
    assert len(seen) == 1 and "its step is not a record; the step is raced again" in str(seen[0].message)


@pytest.mark.parametrize("field, value", [("ours_us", "abc"), ("inductor_us", True), ("label", 3),
                                          ("mode", None), ("chosen", "tvm")])
def test_a_race_record_with_a_value_of_another_type_is_none(field: str, value: object) -> None:
    """The backend reads the race's times as numbers (float(figure)): a record holding text there is damaged,
    so the region is raced again rather than failing every later compile."""
    good = {"label": "r", "chosen": "fusionsearch", "ours_us": 3.0, "inductor_us": None, "fusion": "f",
            "mode": "default", "reason": ""}
    assert RegionChoice.from_dict(good) == RegionChoice(**good)
    assert RegionChoice.from_dict({**good, field: value}) is None


MODEL = ("import torch\n\n"
         "def make():\n"
         "    torch.manual_seed(0)\n"
         "    return torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.Linear(32, 16)).eval()\n")


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.iterdir())


def test_damaged_entries_under_tune_model_and_torch_compile_are_searched_again_and_repaired(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 53 items 12 and 18: a `best_us` of "abc" ended `tune-model` in a traceback and made every later
    torch.compile fall back without repairing it; a FIFO entry hung it; a directory entry left a .tmp file per
    compile. Each damaged entry is now one warning, searched again and overwritten."""
    from fusionsearch import cli

    (tmp_path / "model.py").write_text(MODEL)
    cache = tmp_path / "plans"
    argv = ["tune-model", f"{tmp_path / 'model.py'}:make", "--inputs", "8x32", "--trials", "2", "--cache", str(cache),
            "--quiet"]
    assert cli.main(argv) == 0
    assert "2 searched, 0 loaded" in capsys.readouterr().out
    first, second = _entries(cache)
    names = [first.name, second.name]
    DAMAGE["best_us text"][0](first)
    DAMAGE["FIFO"][0](second)
    with deadline(300), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert cli.main(argv) == 0
    assert "2 searched, 0 loaded" in capsys.readouterr().out
    assert sorted(str(w.message).split(": ")[0] for w in seen if "is damaged" in str(w.message)) == \
        [f"plan cache entry {first} is damaged", f"plan cache entry {second} is damaged"]
    assert [p.name for p in _entries(cache)] == names and all(p.is_file() for p in _entries(cache))
    assert all(isinstance(json.loads(p.read_text())["best_us"], float) for p in _entries(cache))

    DAMAGE["directory"][0](first)
    DAMAGE["deep JSON"][0](second)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.Linear(32, 16)).eval()
    x = torch.randn(8, 32)
    torch._dynamo.reset()
    be = fs.backend(trials=2, fallback="eager", cache=str(cache))
    with warnings.catch_warnings(record=True) as seen, torch.no_grad():
        warnings.simplefilter("always")
        out = torch.compile(model, backend=be, dynamic=False)(x)
        assert torch.allclose(out, model(x), rtol=1e-4, atol=1e-5)
    assert be.stats.declined == [] and (be.stats.searched, be.stats.cached) == (2, 0)
    assert len([w for w in seen if "is damaged" in str(w.message)]) == 2
    assert [p.name for p in _entries(cache)] == names  # repaired, and no temporary file beside them
    assert all(p.is_file() and isinstance(json.loads(p.read_text())["best_us"], float) for p in _entries(cache))
