"""gpt-fast-style models through the backend on the CPU (Triton's interpreter runs the tuned kernels): the Llama
decoder (float32 and int8 weight-only; the bf16 model code, since the interpreter miscomputes bf16) and the
Mixtral-style MoE block compile with fullgraph=True and match eager over several decode steps, KV caches
written in place included; and the race against Inductor keeps whichever code its timer finds faster."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import fusionsearch as fs

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.models import llama, moe  # noqa: E402

STEPS = [5, 1, 1, 1]  # a prefill of 5 tokens, then three decode steps


def _llama(int8: bool) -> torch.nn.Module:
    model = llama.build(llama.tiny(), torch.float32, "cpu")
    if int8:
        llama.quantize_int8(model)
    model.setup_caches(2, torch.float32, "cpu")
    return model


def _caches(model: torch.nn.Module) -> list[torch.Tensor]:
    return [t for layer in model.layers for t in (layer.attention.kv_cache.k_cache, layer.attention.kv_cache.v_cache)]


@pytest.mark.parametrize("int8", [False, True], ids=["float32", "int8"])
def test_a_gpt_fast_decoder_writes_its_kv_cache_and_matches_eager_step_by_step(tmp_path: Path, int8: bool) -> None:
    eager, compiled_model = _llama(int8), _llama(int8)
    be = fs.backend(trials=2, fallback="eager", cache=str(tmp_path), search_backend="model")
    compiled = torch.compile(compiled_model, backend=be, fullgraph=True, dynamic=False)
    gen = torch.Generator().manual_seed(0)
    pos = 0
    with torch.no_grad():
        for n in STEPS:
            idx, input_pos = torch.randint(0, 128, (2, n), generator=gen), torch.arange(pos, pos + n)
            ref, out = eager(idx, input_pos), compiled(idx, input_pos)
            assert torch.allclose(out, ref, rtol=1e-4, atol=1e-4), (pos, float((out - ref).abs().max()))
            for want, got in zip(_caches(eager), _caches(compiled_model), strict=True):
                assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), pos
                assert got[:, :, pos:pos + n].abs().sum() > 0  # the step's keys and values were written
            pos += n
    assert be.stats.declined == [] and be.stats.regions > 0


def test_a_mixtral_style_moe_block_compiles_fullgraph_and_matches_eager(tmp_path: Path) -> None:
    block = moe.build(moe.tiny(), torch.float32, "cpu")
    be = fs.backend(trials=2, fallback="eager", cache=str(tmp_path), search_backend="model")
    compiled = torch.compile(block, backend=be, fullgraph=True, dynamic=False)
    with torch.no_grad():
        for tokens in (1, 6):
            x = torch.randn(tokens, moe.tiny().dim, generator=torch.Generator().manual_seed(tokens))
            ref = block(x)
            assert torch.allclose(compiled(x), ref, rtol=1e-4, atol=1e-5)
    assert be.stats.declined == [] and be.stats.regions > 0


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(32, 48), torch.nn.Linear(48, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


def _raced(tmp_path: Path, faster: str) -> tuple[Any, torch.Tensor, object, list[dict[str, float]]]:
    """The block compiled with a timer that reports `faster` 10x faster than the other candidate: the compiled
    block, its input, the backend, and what the timer was asked."""
    from fusionsearch.dynamo.backend import BackendOptions, _Compiler

    asked: list[dict[str, float]] = []

    def timer(candidates: dict) -> dict[str, float]:
        for fn in candidates.values():
            fn()  # both candidates run on the region's inputs
        times = {name: 1.0 if name == faster else 10.0 for name in candidates}
        asked.append(times)
        return times

    torch.manual_seed(0)
    block = _Block().eval()
    compiler = _Compiler(BackendOptions(trials=2, fallback="eager", cache=str(tmp_path), search_backend="model",
                                        inductor="default", step_race=False), timer=timer)
    x = torch.randn(8, 32)
    compiled = torch.compile(block, backend=compiler, dynamic=False)
    with torch.no_grad():
        out = compiled(x)
        assert torch.allclose(out, block(x), rtol=1e-5, atol=1e-5)
    return compiled, x, compiler, asked


@pytest.mark.parametrize("faster", ["inductor", "fusionsearch"])
def test_each_region_keeps_the_code_its_race_finds_faster(tmp_path: Path, faster: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from fusionsearch.dynamo import race

    calls: list[int] = []  # each call of Inductor's code for a region
    compile_region = race.inductor_region

    def counted(*args: Any) -> Any:
        compiled_region = compile_region(*args)
        return lambda *t: calls.append(1) or compiled_region(*t)

    monkeypatch.setattr(race, "inductor_region", counted)
    compiled, x, compiler, asked = _raced(tmp_path, faster)
    assert len(asked) == 2 and all(set(t) == {"inductor", "fusionsearch"} for t in asked)
    before = len(calls)
    with torch.no_grad():
        compiled(x)
    assert len(calls) - before == (2 if faster == "inductor" else 0)  # the kept code is what a step runs
    choices = list(compiler.stats.choices.values())
    assert [c.chosen for c in choices] == [faster, faster]
    assert all(c.mode == "default" and c.ours_us and c.inductor_us for c in choices)
    explained = compiler.stats.explain()
    assert explained.count(f"{faster} kept") == 2 and "addmm 8x48" in explained


def test_a_cached_race_is_not_run_again(tmp_path: Path) -> None:
    from fusionsearch.dynamo.backend import BackendOptions, _Compiler

    _raced(tmp_path, "inductor")
    calls: list[object] = []
    again = _Compiler(BackendOptions(trials=2, fallback="eager", cache=str(tmp_path), search_backend="model",
                                     inductor="default", step_race=False), timer=lambda c: calls.append(c) or {})
    torch.manual_seed(0)
    block = _Block().eval()
    x = torch.randn(8, 32)
    with torch.no_grad():
        out = torch.compile(block, backend=again, dynamic=False)(x)
        assert torch.allclose(out, block(x), rtol=1e-5, atol=1e-5)
    assert calls == [] and again.stats.cached == 2 and again.stats.searched == 0
    assert [c.chosen for c in again.stats.choices.values()] == ["inductor", "inductor"]


def test_torch_compile_mode_and_options_reach_the_backend(tmp_path: Path) -> None:
    from fusionsearch.dynamo.backend import backend_options
    from fusionsearch.errors import SpecError

    assert backend_options("max-autotune-no-cudagraphs").cudagraphs is False
    assert backend_options("reduce-overhead").inductor == "default"
    assert backend_options(options={"trials": 3, "race": False}).trials == 3
    with pytest.raises(SpecError, match="unknown backend option 'trails'"):
        backend_options(options={"trails": 3})
    with pytest.raises(SpecError, match="mode 'fast'"):
        backend_options("fast")
    torch.manual_seed(0)
    block = _Block().eval()
    x = torch.randn(8, 32)
    opts = {"trials": 2, "fallback": "eager", "cache": str(tmp_path), "search_backend": "model"}
    with torch.no_grad():
        out = torch.compile(block, backend="fusionsearch", options=opts, dynamic=False)(x)
        assert torch.allclose(out, block(x), rtol=1e-5, atol=1e-5)
    assert len(list(tmp_path.iterdir())) == 2  # both regions' plans went to the cache the options named


def test_progress_shows_on_stderr_while_regions_are_searched_and_not_when_all_are_cached(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch.manual_seed(0)
    block = _Block().eval()
    x = torch.randn(8, 32)
    for searching in (True, False):
        torch._dynamo.reset()
        be = fs.backend(trials=2, fallback="eager", cache=str(tmp_path), search_backend="model", progress=True)
        with torch.no_grad():
            torch.compile(block, backend=be, dynamic=False)(x)
        err = capsys.readouterr().err
        if searching:
            assert "fusionsearch: 2 regions, 2 distinct to search" in err and "2/2" in err
            assert "searched 2, cached 0" in err
            assert re.search(r"cached 0 [0-9.]+ us", err)  # the last region's best time
        else:
            assert "fusionsearch:" not in err and be.stats.cached == 2


def test_tune_model_takes_a_factory_that_returns_the_model_and_its_inputs(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from fusionsearch import cli

    root = Path(__file__).resolve().parents[2]
    model_file = tmp_path / "decoder.py"
    model_file.write_text(
        f"import sys, torch\nsys.path.insert(0, {str(root)!r})\nfrom benchmarks.models import llama\n"
        "def make():\n    m = llama.build(llama.tiny(), torch.float32, 'cpu')\n"
        "    m.setup_caches(2, torch.float32, 'cpu')\n"
        "    return m, (torch.randint(0, 128, (2, 1)), torch.tensor([3]))\n")
    cache = tmp_path / "plans"
    argv = ["tune-model", f"{model_file}:make", "--trials", "2", "--backend", "model", "--cache", str(cache),
            "--quiet"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "tuned 11 matmul regions" in out  # qkv, wo, w1, w3, w2 in two layers, and the output projection
    model = _llama(False)
    be = fs.backend(trials=2, fallback="eager", cache=str(cache), search_backend="model")
    idx, pos = torch.randint(0, 128, (2, 1)), torch.tensor([3])
    with torch.no_grad():
        out_model = torch.compile(model, backend=be, fullgraph=True, dynamic=False)(idx, pos)
        ref = _llama(False)(idx, pos)
    assert torch.allclose(out_model, ref, rtol=1e-4, atol=1e-4)
    assert be.stats.searched == 0 and be.stats.cached == be.stats.regions == 11


def test_inductor_compiles_a_decoder_step_around_the_regions_and_writes_the_kv_cache_in_place(
        tmp_path: Path) -> None:
    """The GPU path's whole-graph compile (Inductor's CPU code here, the regions' plans in the interpreter): the
    write-back of the caches is traced into Inductor's graph, and the step's logits and caches match eager."""
    from fusionsearch.dynamo.backend import BackendOptions, _Compiler
    from fusionsearch.dynamo.join import inductor_whole
    from fusionsearch.graph.capture import capture_program, module_state

    model, eager = _llama(False), _llama(False)
    idx, pos = torch.randint(0, 128, (2, 1), generator=torch.Generator().manual_seed(3)), torch.tensor([4])
    with torch.no_grad():
        program = capture_program(model, idx, pos)
        values = [idx, pos, *module_state(model)]
        compiler = _Compiler(BackendOptions(trials=2, search_backend="model", cache=str(tmp_path)))
        steps = compiler.regions(program.graph, values, "cpu-interpreter")
        whole = inductor_whole(program, steps, values, "default")
        (out,) = whole(*values)
        ref = eager(idx, pos)
    assert any(s.kind == "plan" for s in steps) and program.mutated
    assert torch.allclose(out, ref, rtol=1e-4, atol=1e-4)
    for want, got in zip(_caches(eager), _caches(model), strict=True):
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-5) and got[:, :, 4].abs().sum() > 0
