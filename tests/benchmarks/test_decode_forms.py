"""benchmarks/decode_forms_gpu.py's `label|notail`: the config's kernel with its split-K tail cut off (each slice
stores its partial and stops), timed beside the whole kernel to show what the reduction costs; no GPU needed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import fusionsearch as fs  # noqa: E402
from benchmarks.bytes_in_flight import with_config  # noqa: E402
from benchmarks.decode_forms_gpu import build, without_tail  # noqa: E402
from fusionsearch.codegen.module import generate_module  # noqa: E402
from fusionsearch.graph.tolerance import rel_error  # noqa: E402

LABEL = "decode dot n256 k64 sk3 w4 s3 pairs words rows"


def test_notail_keeps_each_slices_partial_store_and_drops_the_arrival_and_the_sum() -> None:
    g = fs.workload("w4_dequant_mm", dtype=torch.float32, M=2, K=512, N=512, G=128)
    whole, product = build(g, LABEL)
    cut, cut_product = build(g, f"{LABEL}|notail")
    assert product and not cut_product
    source = generate_module(with_config(g, LABEL)).source
    kernel = without_tail(source).split("\ndef run(")[0]
    assert source.count("tl.atomic_add(sem_ptr") == 1 and "tl.atomic_add" not in kernel
    assert "tl.store(ws_ptr + ws_off, acc" in kernel and "tl.store(out" not in kernel
    inputs = fs.random_inputs(g, seed=1)
    (ref,) = fs.reference(g, inputs, float64=True)
    (y,) = whole.run(*inputs)
    assert rel_error(y, ref) <= 1e-5
    cut.run(*inputs)  # runs (its output is not the product: the benchmark times it only)
    with pytest.raises(SystemExit, match="unknown variant 'nosuch'"):
        build(g, f"{LABEL}|nosuch")
