"""The `fusionsearch` command line: `list` prints every workload with its default shape; bad usage exits 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fusionsearch import cli
from fusionsearch.datasets.workloads import WORKLOADS


def _line_of(out: str, name: str) -> str:
    lines = [ln for ln in out.splitlines() if ln.split() and ln.split()[0] == name]
    assert len(lines) == 1, f"{name} listed {len(lines)} times in:\n{out}"
    return lines[0]


def test_list_prints_every_workload_with_its_default_shape(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["list"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert len(captured.out.splitlines()) == len(WORKLOADS)
    for name, w in WORKLOADS.items():
        line = _line_of(captured.out, name)
        assert " ".join(f"{k}={v}" for k, v in w.defaults.items()) in line
        assert w.summary in line
    assert "M=16 K=8192 N=8192" in _line_of(captured.out, "w8_dequant_mm")
    assert "M=64 K=4096 N=4096 T=4096" in _line_of(captured.out, "gather_mm")
    assert "M=16 D=4096 H=11008" in _line_of(captured.out, "swiglu")


def test_python_dash_m_list() -> None:
    proc = subprocess.run([sys.executable, "-m", "fusionsearch", "list"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "M=16 K=8192 N=8192" in _line_of(proc.stdout, "w8_dequant_mm")
    for name in WORKLOADS:
        _line_of(proc.stdout, name)


def test_unknown_subcommand_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'frobnicate'" in err and "list" in err
    assert err.count("\n") == 1 and err.startswith("fusionsearch: error: ") and "fusionsearch --help" in err


def test_no_subcommand_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert "required" in err and err.count("\n") == 1


def test_the_command_exits_with_mains_code() -> None:
    proc = subprocess.run([sys.executable, "-m", "fusionsearch", "search", "--trials", "x"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--trials" in proc.stderr, proc.stderr
