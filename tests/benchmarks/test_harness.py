"""benchmarks/harness.py: the pieces the benchmark scripts share write what the scripts wrote by hand before
(Markdown tables, JSON, run facts), parse --cases as the suite did, and take the median over rounds only of
what was timed; no GPU needed."""

from __future__ import annotations

import datetime
import gzip
import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks import harness  # noqa: E402


def test_markdown_tables_are_the_hand_written_ones() -> None:
    rows = [[1, "x"], ["", 2.5]]
    assert harness.md_table(["a", "b"], rows) == ["| a | b |", "|---|---|", "| 1 | x |", "|  | 2.5 |"]
    assert harness.md_row(["case", True, {"w": 1}]) == "| case | True | {'w': 1} |"


def test_case_indices_keep_the_order_given_and_refuse_what_is_not_a_case() -> None:
    assert harness.case_indices("", 4) == [0, 1, 2, 3]
    assert harness.case_indices(" 3, 0,", 4) == [3, 0]
    with pytest.raises(ValueError, match="such as 0,3,8"):
        harness.case_indices("1,b", 4)
    with pytest.raises(ValueError, match="from 0 to 3"):
        harness.case_indices("4", 4)
    assert harness.comma_list("llama-int8 decode b4, ,eager") == ["llama-int8 decode b4", "eager"]


def test_json_is_replaced_whole(tmp_path: Path) -> None:
    path = str(tmp_path / "suite.json")
    harness.write_json({"rows": [1]}, path)
    harness.write_json({"rows": [1, 2]}, path)
    assert harness.read_json(path) == {"rows": [1, 2]}
    assert [p.name for p in tmp_path.iterdir()] == ["suite.json"]
    with pytest.raises(TypeError):  # a record that cannot be written leaves the last complete one
        harness.write_json({"rows": [object()]}, path)
    assert harness.read_json(path) == {"rows": [1, 2]}
    harness.write_json({"a": [1, 2]}, path, indent=None)
    assert (tmp_path / "suite.json").read_text() == json.dumps({"a": [1, 2]})


def test_out_file_makes_the_folder(tmp_path: Path) -> None:
    path = harness.out_file(str(tmp_path / "new" / "deeper"), "e2e.json")
    assert Path(path).parent.is_dir() and path.endswith("e2e.json")
    harness.write_markdown(str(tmp_path / "a.md"), "table")
    harness.write_markdown(str(tmp_path / "b.md"), "table\n")
    assert (tmp_path / "a.md").read_text() == (tmp_path / "b.md").read_text() == "table\n"


def test_run_facts_in_the_order_asked_with_the_date_last() -> None:
    import torch
    import triton

    facts = harness.run_facts("device", "torch", "triton", device="cpu", date="utc")
    assert list(facts) == ["device", "torch", "triton", "date"]
    assert facts["device"] == "cpu" and facts["torch"] == torch.__version__ and facts["triton"] == triton.__version__
    assert datetime.datetime.fromisoformat(facts["date"]).tzinfo is not None
    day = harness.run_facts("device", device="cpu", cpu="cpu (interpreter)", date="day")
    assert day == {"device": "cpu (interpreter)", "date": datetime.date.today().isoformat()}
    with pytest.raises(ValueError):
        harness.run_facts("gpu")


def test_interleaved_medians_only_of_what_ran() -> None:
    def timer(fns, rounds):
        return {"plan": [210.0, 200.0, 230.0], "broken": []}

    by_round, medians = harness.interleaved_medians({"plan": lambda: None, "broken": lambda: None}, 3, timer=timer)
    assert by_round["broken"] == [] and medians == {"plan": 210.0}


def test_figures() -> None:
    assert harness.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert math.isnan(harness.geomean([]))
    ceilings = {"bandwidth_bytes_per_s": 4e12, "peak_flops": 1e15}
    assert harness.floor_us(8_000_000, 1_000, ceilings) == pytest.approx(2.0)  # bytes set it
    assert harness.floor_us(8, 4_000_000_000, ceilings) == pytest.approx(4.0)  # flops set it
    from fusionsearch.measure import Timing

    assert harness.timing_fields(Timing(5.0, 4.0, 6.0, peak_bytes=7)) == {"median_us": 5.0, "p20_us": 4.0,
                                                                        "p80_us": 6.0, "peak_bytes": 7}
    calls = []
    assert harness.wall_median_us(lambda: calls.append(1), reps=3) >= 0 and len(calls) == 4


def test_bar_chart_writes_a_png_or_says_it_could_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "suite.png"
    assert harness.bar_chart(str(path), ["a", "b"], {"eager": [2.0, None], "plan": [1.5, 1.1]}, "time / floor",
                             baseline=1.0, title="t")
    assert path.read_bytes()[:4] == b"\x89PNG"
    monkeypatch.setattr(harness, "pyplot", lambda: None)
    assert not harness.bar_chart(str(tmp_path / "none.png"), ["a"], {"eager": [2.0]}, "x")
    assert not (tmp_path / "none.png").exists()


def test_read_json_reads_a_results_file_kept_gzipped(tmp_path: Path) -> None:
    plain, packed = tmp_path / "a.json", tmp_path / "b.json"
    plain.write_text(json.dumps({"x": 1}))
    with gzip.open(str(packed) + ".gz", "wt") as f:
        json.dump({"y": [2, 3]}, f)
    assert harness.read_json(str(plain)) == {"x": 1} and harness.read_json(str(packed)) == {"y": [2, 3]}
