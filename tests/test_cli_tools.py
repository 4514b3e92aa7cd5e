"""The CLI around the search: `--version`; `-v`/`--log-level` logging the `fusionsearch` loggers (and only them)
on stderr; `studies` listing a storage's studies; `run` replaying a saved plan. Each user error is one line on
stderr and exit 2."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import torch
from cli_helpers import user_error as _user_error

import fusionsearch as fs
from fusionsearch.cli import main
from fusionsearch.measure.validate import Validation

TINY = ["mm_bias_gelu", "--shape", "M=16,K=64,N=64", "--dtype", "float32", "--backend", "model", "--quiet"]


# ---- --version -------------------------------------------------------------------------------------------

def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"fusionsearch {fs.__version__}\n"
    proc = subprocess.run([sys.executable, "-m", "fusionsearch", "--version"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0 and proc.stdout == f"fusionsearch {fs.__version__}\n", proc.stderr


# ---- logging ---------------------------------------------------------------------------------------------

def test_every_logger_of_the_package_is_under_fusionsearch() -> None:
    """The documented hierarchy: what the package logs, `-v` shows (other libraries' loggers it quiets aside)."""
    root = Path(fs.__file__).parent
    names = set()
    for path in root.rglob("*.py"):
        names |= set(re.findall(r"getLogger\(\s*[\"']([^\"']+)[\"']", path.read_text()))
    ours = {n for n in names if n == "fusionsearch" or n.startswith("fusionsearch.")}
    assert {"fusionsearch.search", "fusionsearch.measure", "fusionsearch.backend"} <= ours
    assert names - ours <= {"optuna", "torch._subclasses.fake_tensor"}, names - ours  # theirs, quieted


@pytest.mark.parametrize(("flags", "info", "debug"), [([], False, False), (["-v"], True, False),
                                                      (["-vv"], True, True), (["--log-level", "debug"], True, True),
                                                      (["-vv", "--log-level", "WARNING"], False, False)])
def test_verbose_and_log_level_show_the_search_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         flags: list[str], info: bool, debug: bool) -> None:
    root_handlers = list(logging.getLogger().handlers)
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert main([*flags, "search", *TINY, "--trials", "3", "--storage", url, "--study", "s"]) == 0
    captured = capsys.readouterr()
    assert ("fusionsearch.search INFO: study s created" in captured.err) == info, captured.err
    assert ("fusionsearch.search DEBUG: trial 0 " in captured.err) == debug, captured.err
    assert "best plan:" in captured.out and "fusionsearch.search" not in captured.out
    # Only the fusionsearch logger was given a handler, and only for the command's duration.
    assert logging.getLogger().handlers == root_handlers
    assert logging.getLogger("fusionsearch").handlers == [] and logging.getLogger("fusionsearch").level == 0


def test_a_bad_log_level_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    _user_error(["--log-level", "loud", "list"], capsys, "'loud'", "DEBUG, INFO, WARNING, ERROR, CRITICAL")


# ---- studies ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_studies_lists_each_study_with_its_graph_trials_and_best(tmp_path: Path, kind: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}" if kind == "sqlite" else f"journal:{tmp_path / 'j.log'}"
    assert main(["search", *TINY, "--trials", "4", "--storage", url, "--study", "first"]) == 0
    swiglu = ["swiglu", "--shape", "M=16,D=64,H=64", "--backend", "model", "--quiet", "--bytes-rule", "0.5"]
    assert main(["search", *swiglu, "--trials", "5", "--storage", url]) == 0
    capsys.readouterr()
    assert main(["studies", "--storage", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["study", "graph", "backend", "complete", "pruned", "failed", "waiting", "best", "us"]
    assert len(lines) == 3
    from fusionsearch.search.study import make_storage

    storage = make_storage(url)
    for line, study in zip(lines[1:], sorted(optuna.get_all_study_summaries(storage), key=lambda s: s.study_name),
                           strict=True):
        trials = optuna.load_study(study_name=study.study_name, storage=storage).trials
        counts = [sum(t.state == st for t in trials) for st in (optuna.trial.TrialState.COMPLETE,
                                                                 optuna.trial.TrialState.PRUNED,
                                                                 optuna.trial.TrialState.FAIL)]
        graph = f"{study.user_attrs['graph_name']} ({study.user_attrs['graph']})"
        assert line.startswith(f"{study.study_name} ") and f" {graph} " in line, line
        assert line.split()[-5:] == [*map(str, counts), "0", f"{study.best_trial.value:.2f}"], line
    assert "first " in lines[1] and "mm_bias_gelu M=16,K=64,N=64 float32" in lines[1]
    assert fs.workload("swiglu", M=16, D=64, H=64).signature_hash() in lines[2]


def test_studies_counts_the_slots_not_laid_out_yet_as_waiting(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Slots are laid out as the workers need them: a study of 10**6 trials stopped by its timeout holds a few
    trials, and the rest still wait."""
    from fusionsearch.errors import FusionSearchError
    from fusionsearch.search.study import SearchOptions, run_study

    url = f"sqlite:///{tmp_path / 's.db'}"
    g = fs.workload("mm_bias_gelu", M=16, K=64, N=64)
    try:
        run_study(g, SearchOptions(trials=10**6, backend="model", storage=url, study_name="big", timeout=1.0))
    except FusionSearchError:  # a busy machine: no trial in the time given
        pass
    assert main(["studies", "--storage", url]) == 0
    complete, pruned, failed, waiting = map(int, capsys.readouterr().out.splitlines()[1].split()[-5:-1])
    assert complete + pruned + failed + waiting == 10**6 and waiting > 10**6 - 1000


def test_studies_of_a_storage_that_does_not_exist_is_a_one_line_error_and_creates_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _user_error(["studies", "--storage", f"sqlite:///{tmp_path / 'none.db'}"], capsys, "no such file")
    _user_error(["studies", "--storage", f"journal:{tmp_path / 'none.log'}"], capsys, "no such file")
    _user_error(["studies", "--storage", "not-a-url"], capsys, "not a URL")
    assert os.listdir(tmp_path) == []
    (tmp_path / "junk.db").write_text("not a database")
    _user_error(["studies", "--storage", f"sqlite:///{tmp_path / 'junk.db'}"], capsys, "cannot be read")
    import sqlite3

    with sqlite3.connect(tmp_path / "other.db") as conn:
        conn.execute("CREATE TABLE mine (x)")
    _user_error(["studies", "--storage", f"sqlite:///{tmp_path / 'other.db'}"], capsys, "not an Optuna storage")
    with sqlite3.connect(tmp_path / "other.db") as conn:  # left as it was: no Optuna tables added
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["mine"]


def test_studies_of_an_empty_storage_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'e.db'}"
    from fusionsearch.search.study import make_storage

    make_storage(url)  # an Optuna schema, no study
    assert main(["studies", "--storage", url]) == 0
    assert capsys.readouterr().out == f"no studies in {url}\n"


# ---- run -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "o"
    assert main(["search", *TINY, "--trials", "4", "--out", str(out)]) == 0
    return out


def test_run_validates_a_saved_plan_in_the_interpreter(saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    g = fs.load_graph(str(saved / "graph.json"))
    plan = fs.plan.Plan.from_json((saved / "plan.json").read_text(), g)
    expected = fs.measure.validate(plan, g, fs.random_inputs(g, seed=0))
    assert main(["run", str(saved), "--backend", "interpret"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{saved}: 1 kernel for graph {g.signature_hash()} ({len(g)} nodes)"
    assert out[1] == (f"ok: rel error {expected.rel_err:.3g} against the float64 reference (tolerance 1e-05), on cpu "
                      "(Triton's interpreter)")
    assert out[2].startswith("time: none measured on a CPU")
    shapes = ["16x64:float32", "64x64:float32", "64"]  # a dtype may be left out
    assert main(["run", str(saved), "--backend", "interpret", "--inputs", *shapes]) == 0
    assert "ok: rel error" in capsys.readouterr().out


def test_run_refuses_what_does_not_fit_in_one_line(saved: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _user_error(["run", str(tmp_path / "none")], capsys, "no such directory")
    _user_error(["run", str(tmp_path)], capsys, "no plan.json or graph.json")
    _user_error(["run", str(saved), "--inputs", "16x64:float32", "64x64:float32"], capsys,
                "gives 2 input(s); the graph takes 3", "b 64:float32")
    _user_error(["run", str(saved), "--inputs", "16x64:float32", "64x32:float32", "64"], capsys,
                "--inputs 1 is 64x32:float32; the graph's input w 64x64:float32")
    _user_error(["run", str(saved), "--inputs", "16x64:float16", "64x64", "64"], capsys, "x 16x64:float32")
    _user_error(["run", str(saved), "--inputs", "16by64"], capsys, "16by64")
    _user_error(["run", str(saved), "--backend", "tpu"], capsys, "'tpu'")
    other = tmp_path / "other"
    other.mkdir()
    (other / "plan.json").write_text((saved / "plan.json").read_text())
    fs.workload("mm_bias_gelu", M=16, K=64, N=96, dtype="float32").save(str(other / "graph.json"))
    _user_error(["run", str(other)], capsys, "different graph")


def test_run_of_a_plan_that_does_not_validate_says_its_error(saved: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    V = importlib.import_module("fusionsearch.measure.validate")  # the module (the package exports the function)
    monkeypatch.setattr(V, "validate", lambda *a, **k: Validation(False, 0.25, "output 0 (torch.float32): rel "
                                                                               "error 0.25 > 1e-05"))
    _user_error(["run", str(saved), "--backend", "interpret"], capsys, "does not validate", "rel error 0.25",
                "tolerance 1e-05")


def test_run_in_a_fresh_process_switches_the_interpreter_on_itself(saved: Path) -> None:
    """`python -m fusionsearch run DIR` in a fresh process: the interpreter is switched on by `run` itself."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-m", "fusionsearch", "run", str(saved)], capture_output=True, text=True,
                          timeout=300, check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ok: rel error" in proc.stdout and "on cpu (Triton's interpreter)" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_run_on_a_gpu_validates_then_times(saved: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU path with the GPU stood in for (no GPU in CI): validated first, then timed by measure.benchmark,
    and both figures printed with the GPU's name."""
    import importlib

    import torch

    from fusionsearch.measure.bench import Timing

    calls: list[str] = []
    V = importlib.import_module("fusionsearch.measure.validate")
    B = importlib.import_module("fusionsearch.measure.bench")
    R = importlib.import_module("fusionsearch.graph.reference")
    real_inputs = R.random_inputs
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(R, "random_inputs", lambda g, seed=0, device="cpu": (calls.append(f"inputs {device}"),
                                                                              real_inputs(g, seed))[1])
    monkeypatch.setattr(V, "validate", lambda *a, **k: (calls.append("validate"), Validation(True, 3e-7))[1])
    monkeypatch.setattr(B, "benchmark", lambda *a, **k: (calls.append("benchmark"), Timing(12.25, 12.0, 12.5))[1])
    assert main(["run", str(saved)]) == 0  # auto: the gpu backend where a GPU is
    out = capsys.readouterr().out.splitlines()
    assert calls == ["inputs cuda", "validate", "benchmark"]
    assert out[1] == "ok: rel error 3e-07 against the float64 reference (tolerance 1e-05), on NVIDIA H100 80GB HBM3"
    assert out[2] == "time: 12.2 us median (p20 12.0, p80 12.5) on NVIDIA H100 80GB HBM3"


def test_the_hardware_words_say_measured_or_whose_profile() -> None:
    from fusionsearch.search.facts import hardware_words

    assert hardware_words("gpu", "NVIDIA H100 80GB HBM3") == "measured on NVIDIA H100 80GB HBM3"
    assert hardware_words("model", "NVIDIA H200", gpu_here=False) == \
        "estimated for NVIDIA H200 (the cost model's hardware profile; this machine has no GPU)"
    assert hardware_words("interpret", "NVIDIA H100", gpu_here=True) == \
        "estimated for NVIDIA H100 (the cost model's profile of this machine's GPU)"


def test_run_checks_a_bf16_plan_on_a_float32_copy_in_the_interpreter(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Triton's interpreter miscomputes bfloat16: a saved bf16 plan is validated on a float32 copy (bf16's range:
    a float16 copy of a full-size swiglu overflows), saying so."""
    out = tmp_path / "bf16"
    assert main(["search", "swiglu", "--shape", "M=16,D=64,H=64", "--trials", "3", "--backend", "interpret",
                 "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["run", str(out), "--backend", "interpret"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("ok: rel error") and "on a float32 copy of the bfloat16 graph" in lines[1]
    assert "(tolerance 1e-05)" in lines[1]  # float32's tolerance, the copy's


def test_run_checks_a_bf16_plan_whose_values_pass_float16s_range() -> None:
    """swiglu at D 4096: its outputs reach ~2.6e5 on random inputs, past float16's 65504, so a float16 copy would
    fail every plan with inf; the float32 copy has bfloat16's range."""
    from fusionsearch.plan.reference_plans import fully_fused
    from fusionsearch.search.replay import replay

    g = fs.workload("swiglu", dtype=torch.bfloat16, M=2, D=4096, H=512)
    assert fs.reference(g, fs.random_inputs(g, seed=0), float64=True)[0].abs().max() > 65504
    r = replay(g, fully_fused(g), backend="interpret")
    assert r.ok and r.rel_err < 1e-5 and "float32 copy" in r.device


def test_run_says_each_step_of_a_long_replay_on_stderr(saved: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 53 item 5: `run` of a full-size plan sat 44 s without a word; once it has run 2 s it says the step it
    is at (here from the start) with the time so far; a replay done within 2 s says nothing."""
    from fusionsearch.search import progress

    assert main(["run", str(saved), "--backend", "interpret"]) == 0
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress.Steps.__init__, "__defaults__", (0.0, None))  # say every step at once
    assert main(["run", str(saved), "--backend", "interpret"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert all(line.startswith(f"run {saved}: ") and line.endswith(" s so far)") for line in err), err
    steps = [line.removeprefix(f"run {saved}: ").rsplit(" (", 1)[0] for line in err]
    assert steps[:2] == ["drawing 3 random inputs (0 MB)", "computing the float64 reference"], err
    assert steps[2].startswith("running the plan's 1 kernel in Triton's interpreter"), err


def test_run_and_explain_of_a_decode_plan_in_a_fresh_process(tmp_path: Path) -> None:
    """Issue 53 item 6: the package no longer imports every module with itself; `run` and `explain` still read
    a plan of any kernel kind (the decode kind registers its kernels with the plan reader when imported)."""
    import dataclasses

    from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel

    g = fs.workload("w8_dequant_mm", dtype=torch.float32, M=1, K=128, N=64)
    plan = fs.plan.fully_fused(g)
    kernels = tuple(DecodeKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, DecodeConfig(32, 16, 1, 4, 2, "dot"))
                    if k.kind == "template" else k for k in plan.kernels)
    plan = dataclasses.replace(plan, kernels=kernels).check()
    (tmp_path / "plan.json").write_text(plan.to_json())
    g.save(str(tmp_path / "graph.json"))
    for command in ("run", "explain"):
        proc = subprocess.run([sys.executable, "-m", "fusionsearch", command, str(tmp_path)], capture_output=True,
                              text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert "decode" in proc.stdout
