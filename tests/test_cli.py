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


def test_help_and_version_answer_without_importing_torch() -> None:
    """Issue 53 item 6: the CLI parses its arguments before importing torch or the package's modules, so that
    --help and --version answer at once (2.5 s before: the CLI imported the package and torch first)."""
    code = ("import sys\n"
            "from fusionsearch.cli import main\n"
            "codes = [main([flag]) for flag in ('--help', '--version')]\n"
            "heavy = sorted(m for m in ('torch', 'triton', 'optuna', 'fusionsearch.graph', 'fusionsearch.search') "
            "if m in sys.modules)\n"
            "print('RESULT', codes, heavy)\n")
    for argv in ([sys.executable, "-c", code], [sys.executable, "-m", "fusionsearch", "--version"]):
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
    assert "RESULT [0, 0] []" in subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                               timeout=120, check=True).stdout


def test_import_fusionsearch_still_gives_every_public_name() -> None:
    """Issue 53 item 6: the package's names that need torch load on first use; every one of them is there."""
    code = ("import fusionsearch as fs\n"
            "from fusionsearch import plan as P, workload, OpGraph\n"
            "missing = [n for n in fs.__all__ if getattr(fs, n, None) is None]\n"
            "g = fs.workload('mm_bias_gelu', M=16, K=64, N=64)\n"
            "print('RESULT', missing, isinstance(g, OpGraph), P.fully_fused(g).kernels[0].kind, "
            "set(fs.__all__) <= set(dir(fs)), fs.__version__)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "RESULT [] True template True " in proc.stdout, proc.stdout + proc.stderr


def test_top_level_help_opens_with_what_the_tool_does(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 53 item 8: --help's first sentence is a user's (what the command does), not the module's docstring."""
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    description = out.split("\n\n")[1]
    assert description.startswith("Find how to fuse the pointwise work around matmuls into Triton kernels"), out
    assert "parsing and printing only" not in out
