"""`fusionsearch search` and `fusionsearch explain`: a search writes its plan, graph, module, report and result;
explain reads them back; every user error exits 2 with one line on stderr, no traceback, nothing written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_helpers import user_error as _user_error

import fusionsearch as fs
from fusionsearch.cli import main
from fusionsearch.plan import Plan

SEARCH = ["search", "mm_bias_gelu", "--shape", "M=16,K=64,N=64", "--trials", "6", "--backend", "model", "--quiet"]
OUTPUTS = ("plan.json", "graph.json", "fusionsearch_plan.py", "report.md", "result.json")


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "o"
    assert main([*SEARCH, "--out", str(out)]) == 0
    return out


def test_search_writes_every_output(searched: Path) -> None:
    for name in OUTPUTS:
        assert (searched / name).stat().st_size > 0, name
    g = fs.load_graph(str(searched / "graph.json"))
    assert g.signature_hash() == fs.workload("mm_bias_gelu", M=16, K=64, N=64).signature_hash()
    plan = Plan.from_json((searched / "plan.json").read_text(), g)
    result = json.loads((searched / "result.json").read_text())
    assert result["best_plan"] == json.loads(plan.to_json())
    assert len(result["trials"]) == 6 and result["backend"] == "model"
    assert plan.describe() in (searched / "report.md").read_text()
    # Only the outputs (and the report's optional PNG) land in --out; no temporary directory is left beside it.
    assert set(os.listdir(searched)) - {"report_history.png", "externs.json"} == set(OUTPUTS)
    assert os.listdir(searched.parent) == ["o"]


def test_search_prints_the_explanation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(SEARCH) == 0
    out = capsys.readouterr().out
    assert out.startswith("searching mm_bias_gelu") and "\nbest plan:" in out
    assert re.search(r"kernel 0: (template|decode) mm y", out) and "epilogue: y_bias, out fused" in out
    assert "trials: 6 (" in out


def test_a_closed_stdout_stops_quietly_and_keeps_what_was_written(tmp_path: Path) -> None:
    """`fusionsearch search ... | head -1`: the reader goes away after the first line; the search still writes
    --out, and ends without a traceback."""
    p = subprocess.Popen([sys.executable, "-m", "fusionsearch", *SEARCH, "--out", str(tmp_path / "o")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().startswith("searching mm_bias_gelu")
    p.stdout.close()
    _, err = p.communicate(timeout=300)
    assert p.returncode == 1 and "Traceback" not in err and "BrokenPipe" not in err, err
    assert all((tmp_path / "o" / name).stat().st_size > 0 for name in OUTPUTS)


def test_explain_prints_the_saved_plan(searched: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Each figure named by the model that gave it, and what the search itself recorded of the plan."""
    from fusionsearch.costmodel import hardware
    from fusionsearch.costmodel.analytic import estimate
    from fusionsearch.costmodel.learned import load
    from fusionsearch.costmodel.pricing import plans_matrix

    g = fs.load_graph(str(searched / "graph.json"))
    plan = Plan.from_json((searched / "plan.json").read_text(), g)
    hw = hardware.Hardware.detect()
    analytic = estimate(plan, hw).time_us
    result = json.loads((searched / "result.json").read_text())
    for target in (searched, searched / "plan.json"):
        assert main(["explain", str(target)]) == 0  # no learned model for this device (conftest)
        out = capsys.readouterr().out
        figures = out.split("the search:")[0]
        assert plan.describe() in out and "kernel 0:" in out and "learned" not in figures
        assert f"plan: analytic model {analytic:.1f} us\n" in out
        assert f"the search: {result['best_us']:.1f} us (predicted by the {result['cost_model']} cost model" in out
    shipped = os.path.join(os.path.dirname(fs.__file__), "datasets", "data", "costmodel.npz")
    monkeypatch.setenv("FUSIONSEARCH_MODEL", shipped)
    model = load(shipped)
    if model.hardware_["name"] == hw.name:  # the shipped H200 model prices it too
        learned = float(model.predict(plans_matrix([plan], hw)[0]).sum())
        assert main(["explain", str(searched)]) == 0
        assert f"plan: analytic model {analytic:.1f} us, learned ({hw.name}) model {learned:.1f} us" in \
            capsys.readouterr().out


@pytest.mark.parametrize(("extra", "words"), [
    (["nope_workload"], ("nope_workload", "built-in")),
    (["mm_bias_gelu", "--shape", "M=abc"], ("M=abc",)),
    (["mm_bias_gelu", "--shape", "M16"], ("M16",)),
    (["mm_bias_gelu", "--shape", "Q=16"], ("Q",)),
    (["mm_bias_gelu", "--shape", "M=16", "--backend", "nope"], ("nope",)),
    (["mm_bias_gelu", "--shape", "M=16", "--sampler", "nope"], ("nope",)),
    (["mm_bias_gelu", "--shape", "M=16", "--trials", "0"], ("trials",)),
    (["mm_bias_gelu", "--storage", "not-a-url"], ("not a URL",)),
    (["mm_bias_gelu", "--trial-timeout", "0"], ("--trial-timeout", "positive")),
    (["no/such/spec.json"], ("no such file",)),
])
def test_bad_search_input_is_a_one_line_error(extra: list[str], words: tuple[str, ...],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    _user_error(["search", *extra, "--quiet"], capsys, *words)


def test_a_malformed_spec_file_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"inputs": [')
    _user_error(["search", str(bad), "--quiet"], capsys, "not valid JSON")
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"inputs": 3}')
    _user_error(["search", str(wrong), "--quiet"], capsys)
    spec = tmp_path / "g.json"
    fs.workload("mm_bias_gelu", M=16, K=64, N=64).save(str(spec))
    _user_error(["search", str(spec), "--shape", "M=16", "--quiet"], capsys, "--shape")


def test_a_spec_file_is_searched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "g.json"
    fs.workload("w8_dequant_mm", M=16, K=64, N=64).save(str(spec))
    assert main(["search", str(spec), "--trials", "4", "--backend", "model", "--quiet"]) == 0
    assert "prologue B: w_dequant, w_scaled fused" in capsys.readouterr().out


def test_a_non_empty_out_directory_is_refused_untouched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "full"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    _user_error([*SEARCH, "--out", str(out)], capsys, "not empty")
    assert os.listdir(out) == ["keep.txt"] and (out / "keep.txt").read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["full"]


def test_an_empty_out_directory_is_used(tmp_path: Path) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    assert main([*SEARCH, "--out", str(out)]) == 0
    assert all((out / name).exists() for name in OUTPUTS)


def test_explain_of_a_missing_file_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _user_error(["explain", str(tmp_path / "nothing" / "plan.json")], capsys)
    _user_error(["explain", str(tmp_path)], capsys)  # a directory without plan.json or graph.json


def test_explain_of_a_plan_for_another_graph_is_a_one_line_error(searched: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.json"
    fs.workload("mm_bias_gelu", M=16, K=64, N=96).save(str(other))
    _user_error(["explain", str(searched / "plan.json"), "--graph", str(other)], capsys, "different graph")
    broken = tmp_path / "plan.json"
    broken.write_text("{not json")
    _user_error(["explain", str(broken), "--graph", str(searched / "graph.json")], capsys, "not valid JSON")


def test_python_dash_m_search_in_the_interpreter() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-m", "fusionsearch", "search", "mm_bias_gelu", "--shape",
                           "M=16,K=64,N=64", "--trials", "4", "--backend", "interpret", "--quiet"],
                          capture_output=True, text=True, timeout=300, check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "best plan" in proc.stdout
    assert "backend interpret" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_out_in_a_directory_that_does_not_exist_yet(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "o"
    assert main([*SEARCH, "--out", str(out)]) == 0
    assert all((out / name).exists() for name in OUTPUTS)
    assert os.listdir(out.parent) == ["o"]


# ---- what a search says: files written, the hardware its time is for, --json --------------------------------

NO_GPU_WORDS = "estimated for NVIDIA H200 (the cost model's hardware profile; this machine has no GPU)"


def test_the_wrote_line_lists_every_file_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    assert main([*SEARCH, "--out", str(out)]) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("wrote ")]
    assert line == f"wrote {out}/ ({', '.join(sorted(os.listdir(out)))})"
    assert set(OUTPUTS) <= set(os.listdir(out))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the words for a machine without a GPU")
def test_the_summary_names_the_hardware_the_time_is_estimated_for(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(SEARCH) == 0
    best = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("best: ")]
    assert len(best) == 1 and best[0].endswith(f" us, {NO_GPU_WORDS}"), best


def test_search_json_prints_one_object_with_the_facts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    assert main([*SEARCH, "--out", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    facts = json.loads(captured.out)  # stdout is the JSON object alone
    assert captured.err.startswith("searching mm_bias_gelu")  # the human line moved to stderr
    result = json.loads((out / "result.json").read_text())
    assert facts["best_plan"] == json.loads((out / "plan.json").read_text()) == result["best_plan"]
    assert facts["best_us"] == result["best_us"] and facts["backend"] == "model" and not facts["measured"]
    assert facts["how"] == f"predicted by the {result['cost_model']} cost model"
    assert facts["trials"]["total"] == 6 and facts["trials"]["by_status"] == result["counts"]
    assert facts["trials"]["complete"] + facts["trials"]["pruned"] + facts["trials"]["failed"] == 6
    assert facts["graph"] == {"name": "mm_bias_gelu M=16,K=64,N=64 bfloat16",
                              "hash": fs.workload("mm_bias_gelu", M=16, K=64, N=64).signature_hash()}
    assert facts["hardware"] == "NVIDIA H200" or torch.cuda.is_available()
    assert facts["files"] == sorted(os.listdir(out)) and facts["out"] == str(out)
    assert facts["kernels"][0]["epilogue"] == ["y_bias", "out"] and facts["possible_plans"] is None


def test_explain_json_holds_what_the_text_says(searched: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fusionsearch.costmodel.analytic import estimate
    from fusionsearch.costmodel.hardware import Hardware

    assert main(["explain", str(searched), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    g = fs.load_graph(str(searched / "graph.json"))
    plan = Plan.from_json((searched / "plan.json").read_text(), g)
    est = estimate(plan, Hardware.detect())
    assert facts["plan"] == json.loads(plan.to_json()) and facts["graph"] == g.signature_hash()
    assert facts["analytic_us"] == pytest.approx(est.time_us) and facts["learned_us"] is None
    (k,) = facts["kernels"]
    assert k["kind"] in ("template", "decode")  # M = 16: the decode kind may run it
    assert (k["matmul"], k["op"], k["epilogue"]) == ("y", "mm", ["y_bias", "out"])
    assert (k["bytes_read"], k["bytes_written"], k["flops"]) == (est.per_kernel[0].bytes_read,
                                                                 est.per_kernel[0].bytes_written,
                                                                 est.per_kernel[0].flops)
    assert k["config"] == plan.kernels[0].config.short() and k["analytic_us"] == pytest.approx(est.time_us)
    result = json.loads((searched / "result.json").read_text())
    assert facts["search"]["best_us"] == result["best_us"] and facts["search"]["backend"] == "model"
    assert main(["explain", str(searched)]) == 0  # the text says the same figures
    text = capsys.readouterr().out
    assert f"analytic model {facts['analytic_us']:.1f} us" in text and f"figures {facts['hardware_words']}" in text


def test_a_study_reused_for_another_graph_is_a_one_line_error(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 24: `--study demo` for mm_bias_gelu, then for swiglu: exit 2 naming both, nothing searched."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert main([*SEARCH, "--storage", url, "--study", "demo"]) == 0
    capsys.readouterr()
    other = ["search", "swiglu", "--shape", "M=16,D=64,H=64", "--trials", "4", "--backend", "model", "--quiet"]
    _user_error([*other, "--storage", url, "--study", "demo", "--out", str(tmp_path / "o")], capsys,
                "'demo'", "mm_bias_gelu M=16,K=64,N=64 bfloat16", "swiglu M=16,D=64,H=64 bfloat16", "--study")
    assert not (tmp_path / "o").exists()
    assert main([*SEARCH, "--storage", url, "--study", "demo", "--trials", "8"]) == 0  # the same graph resumes
    assert "trials: 8 (" in capsys.readouterr().out


def test_a_graph_of_one_possible_plan_is_searched_in_one_trial(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    g = fs.OpGraph()
    g.set_outputs([g.add("gelu", [g.input("x", [16, 64], "float32")])])
    g.save(str(tmp_path / "pw.json"))
    assert main(["search", str(tmp_path / "pw.json"), "--trials", "16", "--backend", "model", "--quiet"]) == 0
    out = capsys.readouterr().out
    first = f"searching {tmp_path / 'pw.json'} (2 nodes, 0 matmuls), 1 possible plan: 1 trial, backend model"
    assert out.startswith(first)
    assert "trials: 1 (1 estimated)" in out


# ---- issue 53 item 8: what a user notices ----------------------------------------------------------------------

def test_a_plan_file_that_is_not_json_is_named_in_the_error(searched: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`plan: not valid JSON` named no file; explain and run name the plan file they read."""
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "graph.json").write_text((searched / "graph.json").read_text())
    (saved / "plan.json").write_text("{not json")
    for argv in (["explain", str(saved)], ["run", str(saved)]):
        err = _user_error(argv, capsys, f"{saved / 'plan.json'}: not valid JSON")
        assert "plan: " not in err, err


def test_the_out_directory_has_the_permissions_the_umask_gives(tmp_path: Path) -> None:
    """--out was renamed from tempfile.mkdtemp's directory, 0700 whatever the umask; now as any new directory."""
    old = os.umask(0o022)
    try:
        assert main([*SEARCH, "--out", str(tmp_path / "o")]) == 0
    finally:
        os.umask(old)
    assert (tmp_path / "o").stat().st_mode & 0o777 == 0o755


def test_one_matmul_is_said_in_the_singular(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SEARCH, "--trials", "1"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("searching mm_bias_gelu (6 nodes, 1 matmul), 1 trial, backend model"), first
