"""The CLI on a CPU without TRITON_INTERPRET set (issue 53 item 16): a graph with an extern op (whose shape is
found on fake tensors, which imports Triton) is searched and run in Triton's interpreter, chosen by the rule
the API shares (settings.interpret_without_gpu) before anything imports Triton."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

import fusionsearch as fs


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # as a user's shell has it
    return subprocess.run([sys.executable, "-m", "fusionsearch", *argv], capture_output=True, text=True, env=env,
                          timeout=300)


def _decode_first_model(folder: Path) -> str:
    """A learned model file that prices every decode kernel at 1 µs and every other kernel at 100 µs."""
    import numpy as np

    from fusionsearch.costmodel.features import FEATURE_NAMES
    from fusionsearch.costmodel.learned import LearnedCostModel

    X = np.random.default_rng(0).uniform(1, 10, size=(64, len(FEATURE_NAMES)))
    X[:, FEATURE_NAMES.index("kind_decode")] = np.arange(64) % 2
    y = np.where(X[:, FEATURE_NAMES.index("kind_decode")] == 1, 1.0, 100.0)
    path = str(folder / "decode_first.npz")
    LearnedCostModel(max_iter=20, n_bags=1, baseline=False, width_split=False).fit(X, y).save(path)
    return path


def test_an_extern_softmax_after_a_matmul_searches_and_runs_without_triton_interpret(tmp_path: Path) -> None:
    g = fs.capture(lambda a, b: torch.softmax(a @ b, -1), torch.randn(16, 32), torch.randn(32, 32))
    assert [n for n in g.topo_order() if g.node(n).op == "extern"]
    spec, out = tmp_path / "mm_softmax.json", tmp_path / "out"
    g.save(str(spec))
    # a model that ranks the decode kernel first (the shipped one did until the pooled model of issue 54, which
    # ranks the template first): its split-K sum calls Triton's library (tl.sum), which an interpreted kernel can
    # call only when Triton was imported with the interpreter on
    search = _cli("search", str(spec), "--trials", "3", "--backend", "interpret", "--quiet", "--json",
                  "--cost-model", _decode_first_model(tmp_path), "--out", str(out))
    assert search.returncode == 0, search.stderr[-2000:]
    assert "Cannot call @triton.jit'd" not in search.stdout + search.stderr
    assert [k["kind"] for k in json.loads((out / "plan.json").read_text())["kernels"]] == ["decode", "extern"]
    run = _cli("run", str(out), "--backend", "interpret")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "ok: rel error" in run.stdout and "Triton's interpreter" in run.stdout
