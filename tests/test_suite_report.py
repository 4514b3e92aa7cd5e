"""benchmarks/suite.py's CPU side: the interleaved re-timing of a case's variants (the GPU timer replaced)
and the report it feeds (the copy yardstick only for bandwidth-bound cases, the compute-bound tile probe)."""

from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest

SUITE_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "suite.py"


@pytest.fixture(scope="module")
def suite():
    spec = importlib.util.spec_from_file_location("suite", SUITE_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(suite, us, name):
    return {"median_us": us, "p20_us": us - 1, "p80_us": us + 1, "peak_bytes": 0, suite.TIMED: lambda: name}


def case_row(suite, floor_us=200.0, copy_us=30.0):
    return {"index": 1, "case": "mm M4096", "floor_us": floor_us, "copy_same_bytes": timed(suite, copy_us, "copy"),
            "variants": {"cublas_bare": timed(suite, 190.0, "cublas"), "eager": timed(suite, 250.0, "eager"),
                         "max_autotune": {"error": "compile failed"},
                         "fusionsearch": {**timed(suite, 230.0, "plan"), "ok": True,
                                          "tma_loads": timed(suite, 240.0, "tma"),
                                          "tile_probe": [{"config": "128x256x64 g8 sk1 w8 s3", "options": "plain",
                                                          **timed(suite, 205.0, "probe")}]}}}


def test_rounds_replace_the_first_pass(suite, monkeypatch):
    seen = {}

    def fake_rounds(fns, rounds):
        seen.update({name: fn() for name, fn in fns.items()})
        # The plan ran at 230 alone but 210, 200, 220 interleaved; the others alike.
        return {name: [210.0, 200.0, 220.0] if name == "fusionsearch" else [100.0, 300.0, 200.0] for name in fns}

    monkeypatch.setattr(suite, "time_interleaved", fake_rounds)
    row = case_row(suite)
    suite.retime_interleaved(row, rounds=3)
    assert seen == {"copy": "copy", "cublas_bare": "cublas", "eager": "eager", "fusionsearch": "plan",
                    "tma_loads": "tma", "probe 128x256x64 g8 sk1 w8 s3 plain": "probe"}
    plan = row["variants"]["fusionsearch"]
    assert plan["median_us"] == 210.0 and plan["rounds_us"] == [210.0, 200.0, 220.0]
    assert plan["first_pass"] == {"median_us": 230.0, "p20_us": 229.0, "p80_us": 231.0}
    assert row["variants"]["eager"]["median_us"] == 200.0
    assert row["variants"]["max_autotune"] == {"error": "compile failed"}
    json.dumps(row)  # every held callable dropped


def test_failed_rounds_keep_the_first_pass(suite, monkeypatch):
    def broken(fns, rounds):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(suite, "time_interleaved", broken)
    row = case_row(suite)
    suite.retime_interleaved(row, rounds=3)
    assert "illegal memory access" in row["rounds_error"]
    assert row["variants"]["fusionsearch"]["median_us"] == 230.0
    json.dumps(row)


def test_report_uses_the_copy_only_when_bytes_set_the_floor(suite, monkeypatch):
    monkeypatch.setattr(suite, "time_interleaved", lambda fns, rounds: {n: [] for n in fns})
    compute, memory = case_row(suite), case_row(suite, floor_us=8.0, copy_us=12.0)
    memory["index"], memory["case"] = 0, "mm M16"
    for row in (compute, memory):
        suite.retime_interleaved(row, rounds=0)
    report = {"device": "H200", "torch": "2", "triton": "3", "date": "today", "trials": 32, "rounds": 5,
              "ceilings": {"bandwidth_bytes_per_s": 4.25e12, "peak_flops": 687e12}, "rows": [memory, compute]}
    md = suite.markdown(report)
    assert "median over 5 interleaved rounds" in md
    table = md.split("| case | floor")[1].split("\n\n")[0].splitlines()
    head = ("case | floor" + table[0]).strip(" |").split(" | ")
    rows = {cells[0]: cells for cells in (line.strip(" |").split(" | ") for line in table[2:])}
    col = head.index("fusionsearch ÷ copy")
    assert rows["mm M16"][col] == f"{230 / 12:.2f}"
    assert rows["mm M4096"][col] == ""
    probe = next(line for line in md.splitlines() if line.startswith("| mm M4096 | 230.0"))
    assert probe.endswith(f"| {205 / 190:.2f} |")


def test_gpu_state_reads_nvidia_smi_and_is_empty_without_it(suite, monkeypatch):
    import subprocess

    import torch

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    calls = []

    def smi(args, **kw):
        calls.append(args)
        return subprocess.CompletedProcess(args, 0, stdout="1980 MHz, 3201 MHz, 612.35 W, 71, 0x0000000000000004\n")

    monkeypatch.setattr(subprocess, "run", smi)
    assert suite.gpu_state() == {"clocks.sm": "1980 MHz", "clocks.mem": "3201 MHz", "power.draw": "612.35 W",
                                 "temperature.gpu": "71", "clocks_throttle_reasons.active": "0x0000000000000004"}
    assert calls[0][0] == "nvidia-smi" and "--id=0" in calls[0]
    monkeypatch.setattr(subprocess, "run", lambda args, **kw: subprocess.CompletedProcess(args, 9, stdout=""))
    assert suite.gpu_state() == {}

    def missing(args, **kw):
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(subprocess, "run", missing)
    assert suite.gpu_state() == {}


def retimed(us_first, rounds):
    return {"first_pass": {"median_us": us_first}, "rounds_us": rounds, "median_us": sorted(rounds)[len(rounds) // 2],
            "ok": True}


def test_an_unsteady_baseline_is_marked_and_left_out_of_the_geometric_mean(suite):
    # Rounds of 2026-12-07 c (H100, mm_bias_gelu M16): max-autotune spread 67-131 us after a first pass of 21.4;
    # torch.compile steady in its rounds but over 1.5x its first pass (06 l); eager steady after a slow first pass.
    row = {"index": 4, "case": "mm_bias_gelu M16", "floor_us": 11.2, "copy_same_bytes": retimed(12.5, [12.6] * 5),
           "variants": {"eager": retimed(61.4, [21.1, 21.2, 21.4, 21.3, 20.2]),
                        "torch_compile": retimed(20.7, [33.6, 37.2, 28.6, 31.0, 35.0]),
                        "max_autotune": retimed(21.4, [100.9, 118.6, 131.0, 67.4, 94.8]),
                        "fusionsearch": retimed(17.5, [16.0, 16.0, 16.1, 17.1, 16.1])}}
    assert [suite.unsteady(row["variants"][v]) for v in ("eager", "torch_compile", "max_autotune", "fusionsearch")] \
        == [False, True, True, False]
    report = {"device": "H100", "torch": "2", "triton": "3", "date": "today", "trials": 32, "rounds": 5,
              "ceilings": {"bandwidth_bytes_per_s": 3.03e12, "peak_flops": 732e12}, "rows": [row]}
    md = suite.markdown(report)
    table = md.split("\n\n| case | floor")[1].split("\n\n")[0].splitlines()
    head = [c.strip() for c in ("| case | floor" + table[0]).split("|")[1:-1]]
    cells = dict(zip(head, (c.strip() for c in table[2].split("|")[1:-1]), strict=True))
    assert cells["max-autotune"] == "100.9 ~" and cells["× max-autotune"] == f"{100.9 / 16.1:.2f} ~"
    assert cells["torch.compile"] == "33.6 ~" and cells["eager"] == "21.2" and cells["× eager"] == f"{21.2 / 16.1:.2f}"
    assert cells["fusionsearch"] == "16.1"
    assert "n/a over max-autotune" in md and "n/a over torch.compile" in md and "over eager (1 cases)" in md
