"""fs.tune as a new user meets it (issue 53 items 1, 3, 8): on a CPU it chooses Triton's interpreter by the CLI's
rule without TRITON_INTERPRET set; unknown options are refused by name; export refuses what the CLI's --out
refuses; the result holds its Optuna study and prints in one short line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest
import torch

import fusionsearch as fs
from fusionsearch.errors import SpecError
from fusionsearch.search.result import TuneResult

TUNE_A_FUNCTION = textwrap.dedent('''
    import torch, fusionsearch as fs
    def f(x, w, b):
        return torch.nn.functional.gelu(x @ w + b)
    x, w, b = torch.randn(16, 32), torch.randn(32, 32), torch.randn(32)
    res = fs.tune(f, x, w, b, trials=3)
    err = float((res.compile()(x, w, b) - f(x, w, b)).abs().max())
    counts = res.counts()
    print(res.backend, counts.get("validated", 0) > 0, counts.get("invalid", 0) + counts.get("failed", 0), err < 1e-4)
''')


def _python(script: str) -> subprocess.CompletedProcess[str]:
    """`script` in a fresh interpreter whose environment does not set TRITON_INTERPRET, as a user's has not."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)


def _f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x @ w + b)


ARGS = (torch.randn(16, 32), torch.randn(32, 32), torch.randn(32))


@pytest.fixture(scope="module")
def small_result() -> TuneResult:
    return fs.tune(_f, *ARGS, trials=3, backend="model")


def test_tune_of_a_function_on_a_cpu_without_triton_interpret() -> None:
    r = _python(TUNE_A_FUNCTION)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[0] == "interpret True 0 True"  # validated in the interpreter, none failed, right


def test_tune_after_triton_was_imported_for_a_gpu_says_what_to_do() -> None:
    r = _python("import triton\n" + TUNE_A_FUNCTION)  # Triton's library is now built for a GPU: no switch undoes it
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("fusionsearch.errors.CodegenError: Triton was imported") and "TRITON_INTERPRET=1" in last
    assert "Cannot call @triton.jit'd" not in r.stderr and "no trial produced" not in r.stderr


def test_a_plan_validates_on_a_cpu_without_triton_interpret() -> None:
    """The README's second half (a plan built, validated and run), without fs.tune before it."""
    r = _python(textwrap.dedent('''
        import torch, fusionsearch as fs
        from fusionsearch import plan as P
        g = fs.workload("mm_bias_gelu", M=16, K=64, N=64, dtype=torch.float32)
        v = fs.measure.validate(P.heuristic(g), g)
        print(v.ok, v.reason or "-", len(fs.compile_plan(P.unfused(g))(*fs.random_inputs(g))))
    '''))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout == "True - 1\n"


@pytest.mark.parametrize(("option", "words"), [
    ("frobnicate", ["unknown fs.tune option 'frobnicate'; valid: trials, backend"]),
    ("trails", ["unknown fs.tune option 'trails' (did you mean 'trials'?)", "cost_model"]),
])
def test_tune_refuses_an_unknown_option_by_name(option: str, words: list[str]) -> None:
    with pytest.raises(SpecError) as e:
        fs.tune(_f, *ARGS, **{option: 3})
    assert all(w in str(e.value) for w in words) and "\n" not in str(e.value)


def test_the_result_holds_its_study_and_prints_in_one_short_line(small_result: TuneResult) -> None:
    text = repr(small_result)
    assert text == (f"TuneResult(mm add gelu 16x32x32 float32: best {small_result.best_us:.1f} us on backend model, "
                    f"3 trials, study {small_result.study_name!r})")
    assert isinstance(small_result.study, optuna.Study)
    assert [t.number for t in small_result.study.trials] == [t.number for t in small_result.trials]
    assert small_result.study.best_value == pytest.approx(small_result.best_us)


def test_export_refuses_what_the_cli_refuses(small_result: TuneResult, tmp_path: Path) -> None:
    from fusionsearch.cli import _check_out_dir

    afile = tmp_path / "afile"
    afile.write_text("mine")
    full = tmp_path / "full"
    full.mkdir()
    (full / "plan.json").write_text("mine")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    cases = {afile: "is a file, not a directory", full: "exists and is not empty", link: "is a symbolic link",
             afile / "sub": "is not a directory", Path("/proc/fusionsearch-test/out"): "no file can be created in"}
    for path, words in cases.items():
        with pytest.raises(SpecError) as api:
            small_result.export(str(path))
        with pytest.raises(SpecError) as cli:
            _check_out_dir(str(path))
        assert words in str(api.value) and str(api.value).startswith(f"export directory {str(path)!r}")
        assert str(cli.value) == str(api.value).replace("export directory", "--out", 1)  # one check, two names
    assert afile.read_text() == (full / "plan.json").read_text() == "mine" and os.listdir(full) == ["plan.json"]
    assert not (tmp_path / "elsewhere").exists()
    assert Path(small_result.export(str(tmp_path / "new"))).name == "fusionsearch_plan.py"
