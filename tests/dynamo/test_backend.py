"""The torch.compile backend on the CPU (Triton's interpreter runs the tuned kernels): models compile and match
eager, identical layers are searched once, the plan cache spares a second process the search, and graphs the
backend cannot take fall back with their reason."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import fusionsearch as fs
from fusionsearch.errors import SpecError

MODELS = textwrap.dedent('''
    import torch

    class MLPBlock(torch.nn.Module):
        """A transformer MLP block: x + W2 gelu(W1 norm(x) + b1) + b2."""

        def __init__(self, d=64, h=128):
            super().__init__()
            self.norm = torch.nn.LayerNorm(d)
            self.up, self.down = torch.nn.Linear(d, h), torch.nn.Linear(h, d)

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

    class W8Linear(torch.nn.Module):
        """Weight-only int8: y = x @ (w_int8 * scale[N]) + b."""

        def __init__(self, k, n, seed):
            super().__init__()
            g = torch.Generator().manual_seed(seed)
            self.register_buffer("w", torch.randint(-127, 128, (k, n), generator=g, dtype=torch.int8))
            self.register_buffer("scale", torch.rand(n, generator=g) / (64 * k ** 0.5))
            self.register_buffer("b", torch.randn(n, generator=g) * 0.1)

        def forward(self, x):
            return x @ (self.w.to(x.dtype) * self.scale.to(x.dtype)) + self.b.to(x.dtype)

    class DecoderLayer(torch.nn.Module):
        """A decoder layer: RMSNorm, attention (SDPA), RMSNorm, SwiGLU MLP; sizes read off the input."""

        def __init__(self, d=32, h=64, heads=2):
            super().__init__()
            self.heads = heads
            self.n1, self.n2 = torch.nn.Parameter(torch.ones(d)), torch.nn.Parameter(torch.ones(d))
            self.qkv, self.o = torch.nn.Linear(d, 3 * d, bias=False), torch.nn.Linear(d, d, bias=False)
            self.w1, self.w3 = torch.nn.Linear(d, h, bias=False), torch.nn.Linear(d, h, bias=False)
            self.w2 = torch.nn.Linear(h, d, bias=False)

        @staticmethod
        def norm(x, w):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.norm(x, self.n1)).split(d, dim=-1)
            q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=s > 1)
            x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
            y = self.norm(x, self.n2)
            return x + self.w2(torch.nn.functional.silu(self.w1(y)) * self.w3(y))

    def w8_stack(dtype=torch.float32):
        return torch.nn.Sequential(W8Linear(64, 96, 1), torch.nn.ReLU(), W8Linear(96, 32, 2)).to(dtype)
''')
ns: dict[str, object] = {}
exec(compile(MODELS, "models", "exec"), ns)  # the subprocess test builds the same models from the same text


def _compile(model: torch.nn.Module, cache: Path, **options: object) -> tuple[torch.nn.Module, object]:
    be = fs.backend(**{"trials": 3, "fallback": "eager", "cache": str(cache), **options})
    return torch.compile(model, backend=be, dynamic=False), be


def _close(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).abs().max() / ref.abs().max())


def _run(model: torch.nn.Module, x: torch.Tensor, cache: Path, **options: object) -> tuple[torch.Tensor, float, Any]:
    """The compiled model's output, its relative error against eager in float64, and the backend's stats."""
    compiled, be = _compile(model, cache, **options)
    with torch.no_grad():
        out = compiled(x)
        ref = model.double()(x.double())
    return out, _close(out, ref), be.stats


def test_a_transformer_mlp_block_compiles_and_matches_eager(tmp_path: Path) -> None:
    torch.manual_seed(0)
    block = ns["MLPBlock"]().eval()
    x = torch.randn(16, 64)
    out, err, stats = _run(block, x, tmp_path)
    assert (stats.regions, stats.searched, stats.declined) == (2, 2, [])  # up and down projections
    assert err < 1e-5


@pytest.mark.parametrize("shape", [(2, 1, 32), (1, 8, 32)], ids=["decode", "prefill"])
def test_a_small_decoder_compiles_and_matches_eager(tmp_path: Path, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(ns["DecoderLayer"](), ns["DecoderLayer"]()).eval()
    x = torch.randn(*shape)
    out, err, stats = _run(model, x, tmp_path, trials=2)
    assert stats.declined == [] and stats.regions == 10  # qkv, o, w1, w3, w2 in each layer
    assert err < 1e-5


def test_identical_layers_are_searched_once(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[ns["MLPBlock"]() for _ in range(4)]).eval()
    x = torch.randn(16, 64)
    out, err, stats = _run(model, x, tmp_path)
    assert (stats.regions, stats.searched, stats.cached) == (8, 2, 6)
    assert len(os.listdir(tmp_path)) == 2 and err < 1e-5


def test_a_w8_quantised_linear_stack_compiles_and_matches_eager(tmp_path: Path) -> None:
    # float32: on the CPU the search validates candidates on random inputs, whose int8 weights times unit
    # scales overflow float16 two layers deep (on a GPU the model's own inputs are used)
    stack = ns["w8_stack"]().eval()
    x = torch.randn(16, 64)
    out, err, stats = _run(stack, x, tmp_path)
    assert (stats.regions, stats.searched, stats.declined) == (2, 2, [])
    assert out.dtype == torch.float32 and err < 1e-5


def test_a_second_process_loads_the_plan_instead_of_searching(tmp_path: Path) -> None:
    script = MODELS + textwrap.dedent(f'''
        import fusionsearch as fs
        stack = w8_stack().eval()
        x = torch.randn(16, 64, generator=torch.Generator().manual_seed(5))
        be = fs.backend(trials=3, fallback="eager", cache={str(tmp_path)!r})
        with torch.no_grad():
            out = torch.compile(stack, backend=be, dynamic=False)(x)
            err = float((out.double() - stack.double()(x.double())).abs().max())
        print(be.stats.searched, be.stats.cached, err)
    ''')
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    first, second = (r.stdout.split() for r in runs)
    assert first[:2] == ["2", "0"] and second[:2] == ["0", "2"]  # searched in the first, loaded in the second
    assert float(second[2]) < 1e-3 and len(os.listdir(tmp_path)) == 2


def test_graphs_it_cannot_take_fall_back_with_their_reason(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    block = ns["MLPBlock"]()
    x = torch.randn(8, 64)
    compiled, be = _compile(block, tmp_path)
    with caplog.at_level(logging.WARNING, logger="fusionsearch.backend"):
        out = compiled(x)  # gradients needed: the kernels are forward-only
    assert out.requires_grad and torch.allclose(out, block(x))
    assert "forward-only" in be.stats.declined[0] and "forward-only" in caplog.text

    torch._dynamo.reset()
    compiled, be = _compile(lambda a: torch.relu(a) * 2, tmp_path)
    assert torch.equal(compiled(x), torch.relu(x) * 2)
    assert be.stats.declined == ["no matmul to fuse around"]

    torch._dynamo.reset()
    monkeypatch.delenv("TRITON_INTERPRET")
    compiled, be = _compile(block.eval(), tmp_path)
    with torch.no_grad():
        assert torch.allclose(compiled(x), block(x))
    assert "CUDA" in be.stats.declined[0] and be.stats.searched == 0


def test_a_region_that_fails_falls_back_instead_of_failing_the_model(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from fusionsearch.dynamo.plan_cache import PlanCache

    def broken(*args: object) -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(PlanCache, "load_entry", broken)
    block = ns["MLPBlock"]().eval()
    x = torch.randn(8, 64)
    compiled, be = _compile(block, tmp_path)
    with torch.no_grad():
        assert torch.allclose(compiled(x), block(x))
    assert "RuntimeError" in be.stats.declined[0] and "illegal memory access" in be.stats.declined[0]


@pytest.mark.parametrize("bad", [{"fallback": "tvm"}, {"trials": 0}])
def test_bad_backend_options_are_spec_errors(bad: dict[str, object]) -> None:
    with pytest.raises(SpecError):
        fs.backend(**bad)


def test_the_backend_is_registered_with_torch_compile() -> None:
    assert "fusionsearch" in torch.compiler.list_backends()


def test_tune_model_fills_the_plan_cache_that_torch_compile_then_reads(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from fusionsearch import cli

    model_file = tmp_path / "model.py"
    model_file.write_text(MODELS + "\ndef make():\n    torch.manual_seed(0)\n"
                          "    return torch.nn.Sequential(*[MLPBlock() for _ in range(3)])\n")
    cache = tmp_path / "plans"
    argv = ["tune-model", f"{model_file}:make", "--inputs", "16x64", "--trials", "3", "--cache", str(cache),
            "--quiet"]
    assert cli.main(argv) == 0
    assert "tuned 6 matmul regions: 2 searched, 4 loaded" in capsys.readouterr().out
    torch.manual_seed(0)  # the same weights: the factory seeds them
    model = torch.nn.Sequential(*[ns["MLPBlock"]() for _ in range(3)]).eval()
    x = torch.randn(16, 64)
    _, err, stats = _run(model, x, cache)
    assert (stats.regions, stats.searched, stats.cached) == (6, 0, 6)
    assert err < 1e-5


@pytest.mark.parametrize("argv, message", [
    (["tune-model", "nomodule_here:make", "--inputs", "16x64"], "cannot be imported"),
    (["tune-model", "json:JSONDecoder", "--inputs", "16x64"], "not a torch.nn.Module"),
    (["tune-model", "json:dumps", "--inputs", "16x64"], "json:dumps() raised TypeError"),
    (["tune-model", "json", "--inputs", "16x64"], "MODULE:FACTORY"),
    (["tune-model", "json:dumps", "--inputs", "16xq"], "write a shape"),
])
def test_tune_model_bad_input_is_one_line_and_exit_2(argv: list[str], message: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from fusionsearch import cli

    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_inductor_compiles_the_graph_around_the_tuned_regions() -> None:
    """The whole graph handed to Inductor with each tuned region one fusionsearch::region call: it computes
    what the regions run one by one compute. Inductor's CPU code and the interpreter here; GPUs in the backend."""
    from fusionsearch.dynamo.backend import BackendOptions, _Compiler
    from fusionsearch.dynamo.join import inductor_whole
    from fusionsearch.graph.capture import CapturedProgram, capture

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.rand(32) + 0.5)
            self.up = torch.nn.Linear(32, 48, bias=False)
            self.down = torch.nn.Linear(48, 32, bias=False)

        def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
            h = x + r
            n = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w
            return h + self.down(torch.nn.functional.silu(self.up(n)))

    torch.manual_seed(0)
    block = Block().eval()
    x, r = torch.randn(4, 2, 32), torch.randn(4, 2, 32)
    values = [x, r, *fs.graph.capture.module_state(block)]
    with torch.no_grad():
        g = capture(block, x, r)
        compiler = _Compiler(BackendOptions(trials=2, search_backend="model"))
        steps = compiler.regions(g, values, "cpu-interpreter")
        assert any(not step.region.tuned for step in steps) and compiler.stats.regions == 2
        env = dict(zip(g.inputs, values, strict=True))
        for step in steps:
            env.update(zip(step.outputs, step.run(*[env[i] for i in step.inputs]), strict=True))
        one_by_one = [env[o] for o in g.outputs]
        whole = inductor_whole(CapturedProgram(g, len(g.outputs), ()), steps, values)
        got = list(whole(*values))
        eager = block(x, r)
    assert len(got) == len(one_by_one) == 1
    assert torch.allclose(got[0], one_by_one[0], rtol=1e-5, atol=1e-6)
    assert torch.allclose(got[0], eager, rtol=1e-4, atol=1e-5)


def test_a_bf16_model_on_the_cpu_is_declined_before_any_search(tmp_path: Path) -> None:
    """Triton's interpreter miscomputes bfloat16 and the generated module refuses it: declined with the reason
    (in the stats, in explain) before anything is searched, the model runs through the fallback."""
    from fusionsearch.dynamo.backend import tune_model

    torch.manual_seed(0)
    block = ns["MLPBlock"]().to(torch.bfloat16).eval()
    x = torch.randn(16, 64, dtype=torch.bfloat16)
    compiled, be = _compile(block, tmp_path)
    with torch.no_grad():
        assert torch.equal(compiled(x), block(x))  # eager: the fallback ran it
    (reason,) = be.stats.declined
    assert reason.startswith("bfloat16 on the CPU") and "miscomputes bfloat16" in reason
    assert (be.stats.regions, be.stats.searched, os.listdir(tmp_path)) == (0, 0, [])
    assert be.stats.explain() == f"graph declined, run by the fallback: {reason}"
    with pytest.raises(fs.FusionSearchError, match="^bfloat16 on the CPU"), torch.no_grad():
        tune_model(block, x, cache=str(tmp_path), progress=False)


def test_explain_on_a_cpu_says_why_no_region_was_raced(tmp_path: Path) -> None:
    stack = ns["w8_stack"]().eval()
    _, _, stats = _run(stack, torch.randn(16, 64), tmp_path, search_backend="model")
    assert stats.explain() == ("2 matmul regions (2 searched, 0 from the plan cache), none raced against Inductor: "
                               "no GPU here: Triton's CPU interpreter runs the kernels, and its times say nothing of "
                               "a GPU's, so each region keeps the plan its search chose (ranked by the cost model)")
    _, _, stats = _run(stack, torch.randn(16, 64), tmp_path, search_backend="model", race=False)
    assert stats.explain().endswith("none raced against Inductor: race=False: each region keeps the plan its search "
                                    "chose")


@pytest.mark.parametrize("call", ["backend", "tune_model"])
def test_an_unknown_backend_option_is_refused_by_name(call: str) -> None:
    from fusionsearch.dynamo.backend import tune_model

    with pytest.raises(SpecError,
                       match=r"option 'trails' \(did you mean 'trials'\?\); valid: trials, measure, search_backend"):
        if call == "backend":
            fs.backend(trails=3)
        else:
            tune_model(ns["MLPBlock"]().eval(), torch.randn(4, 64), trails=3)
