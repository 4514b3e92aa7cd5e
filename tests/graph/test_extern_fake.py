"""Extern nodes infer their shape and dtype on fake tensors: the same result as eager PyTorch on real tensors, no
memory allocated at load (a factory op in a 300-byte spec once took gigabytes), and the op still runs for real."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import fusionsearch as fs
from fusionsearch.errors import GraphError
from fusionsearch.graph import OpGraph, load_graph

# (target, input shapes and dtypes, args with {"input": slot}, kwargs, output_index)
EXTERNS: list[tuple[str, list[tuple[tuple[int, ...], torch.dtype]], list[Any], dict[str, Any], int]] = [
    ("aten.softmax.int", [((4, 8), torch.float16)], [{"input": 0}, -1], {}, 0),
    ("aten._softmax.default", [((4, 8), torch.float32)], [{"input": 0}, 1, False], {}, 0),
    ("aten.log_softmax.int", [((4, 8), torch.bfloat16)], [{"input": 0}, 0], {"dtype": {"dtype": "float32"}}, 0),
    ("aten.sum.dim_IntList", [((4, 8, 3), torch.int8)], [{"input": 0}, [1]], {}, 0),
    ("aten.mean.dim", [((4, 8), torch.float16)], [{"input": 0}, [-1], True], {}, 0),
    ("aten.var.correction", [((4, 8), torch.float32)], [{"input": 0}, [1]], {"correction": 1, "keepdim": True}, 0),
    ("aten.amax.default", [((4, 8), torch.bfloat16)], [{"input": 0}, [0]], {}, 0),
    ("aten.argmax.default", [((4, 8), torch.float32)], [{"input": 0}, 1], {}, 0),
    ("aten.topk.default", [((4, 8), torch.float32)], [{"input": 0}, 3], {}, 1),
    ("aten.sort.default", [((4, 8), torch.float16)], [{"input": 0}], {}, 0),
    ("aten.cumsum.default", [((4, 8), torch.int32)], [{"input": 0}, 1], {}, 0),
    ("aten.native_layer_norm.default", [((4, 8), torch.float32), ((8,), torch.float32), ((8,), torch.float32)],
     [{"input": 0}, [8], {"input": 1}, {"input": 2}, 1e-5], {}, 2),
    ("aten.cat.default", [((4, 8), torch.float32), ((2, 8), torch.float32)], [[{"input": 0}, {"input": 1}]], {}, 0),
    ("aten.stack.default", [((4, 8), torch.float16), ((4, 8), torch.float16)], [[{"input": 0}, {"input": 1}], 1],
     {}, 0),
    ("aten.full.default", [], [[3, 5], 2.5], {}, 0),
    ("aten.arange.start", [], [2, 11], {}, 0),
    ("aten.zeros_like.default", [((3, 5), torch.int64)], [{"input": 0}], {}, 0),
    ("aten._to_copy.default", [((3, 5), torch.float32)], [{"input": 0}], {"dtype": {"dtype": "bfloat16"}}, 0),
    ("aten.where.self", [((4, 1), torch.bool), ((4, 8), torch.float16), ((1, 8), torch.float32)],
     [{"input": 0}, {"input": 1}, {"input": 2}], {}, 0),
    ("aten.bmm.default", [((2, 3, 4), torch.float32), ((2, 4, 5), torch.float32)], [{"input": 0}, {"input": 1}], {}, 0),
]


def _graph(target: str, ins: list[tuple[tuple[int, ...], torch.dtype]], args: list[Any], kwargs: dict[str, Any],
           index: int) -> tuple[OpGraph, str]:
    g = OpGraph()
    names = [g.input(f"x{i}", shape, dtype) for i, (shape, dtype) in enumerate(ins)]
    out = g.add("extern", names, name="e", target=target, args=args, kwargs=kwargs, output_index=index)
    g.set_outputs([out])
    return g, out


def _decode(v: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(v, dict):
        return tensors[v["input"]] if "input" in v else getattr(torch, v["dtype"])
    if isinstance(v, list):
        return [_decode(x, tensors) for x in v]
    return v


@pytest.mark.parametrize(("target", "ins", "args", "kwargs", "index"), EXTERNS, ids=[e[0] for e in EXTERNS])
def test_an_extern_infers_what_eager_pytorch_returns_and_runs_for_real(
        target: str, ins: list[tuple[tuple[int, ...], torch.dtype]], args: list[Any], kwargs: dict[str, Any],
        index: int) -> None:
    g, out = _graph(target, ins, args, kwargs, index)
    inputs = fs.random_inputs(g, seed=0)
    op: Any = torch.ops.aten
    for part in target.split(".")[1:]:
        op = getattr(op, part)
    expected = op(*_decode(args, inputs), **{k: _decode(v, inputs) for k, v in kwargs.items()})
    if isinstance(expected, tuple | list):
        expected = expected[index]
    assert g.node(out).shape == tuple(expected.shape)
    assert g.node(out).dtype == expected.dtype
    (got,) = fs.reference(g, inputs)  # the op itself runs at run time, on real tensors
    assert not got.is_meta and got.shape == expected.shape and got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, equal_nan=True)


def test_a_factory_extern_allocates_nothing_at_load(tmp_path: Path) -> None:
    """aten.full of 16000 x 16000 fp32 is 1 GB when run; loading its 200-byte spec must stay far below that."""
    spec = {"inputs": [], "nodes": [{"name": "f", "op": "extern", "inputs": [],
                                     "attrs": {"target": "aten.full.default", "args": [[16000, 16000], 1.0]}}],
            "outputs": ["f"]}
    path = tmp_path / "full.json"
    path.write_text(json.dumps(spec))
    assert len(path.read_bytes()) < 300
    # VmHWM, the child's own peak: ru_maxrss survives exec, so a child of a large pytest process would report
    # the parent's size (1.3 GiB in a full CI run)
    code = ("import re, sys; from fusionsearch.graph import load_graph; g = load_graph(sys.argv[1]); "
            "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1); "
            "print(g.node('f').shape, hwm)")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    run = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    shape, maxrss_kib = run.stdout.rsplit(")", 1)
    assert shape + ")" == "(16000, 16000)"
    assert int(maxrss_kib) < 800 * 1024, f"loading took {int(maxrss_kib) // 1024} MiB"  # torch itself: ~400 MiB
    assert before >= 0
    assert load_graph(str(path)).node("f").dtype == torch.float32


@pytest.mark.parametrize(("attrs", "message"), [
    ({"target": "aten.topk.default", "args": [{"input": 0}, 2], "output_index": 2}, "'output_index' 2 is out of range"),
    ({"target": "aten.topk.default", "args": [{"input": 0}, 2], "output_index": True}, "must be an integer"),
    ({"target": "aten.softmax.int", "args": [{"input": True}, 0]}, "neither {'input': slot}"),
    ({"target": "aten.softmax.int", "args": [{"input": 1}, 0]}, "neither {'input': slot}"),
    ({"target": "aten.nonzero.default", "args": [{"input": 0}]}, "rejects its inputs"),  # data-dependent shape
    ({"target": "aten.full.default", "args": [[2**62, 2**62], 1.0]}, "rejects its inputs"),
    ({"target": "aten.full.default", "args": [[4, -1], 1.0]}, "rejects its inputs"),
])
def test_a_bad_extern_is_a_graph_error(attrs: dict[str, Any], message: str) -> None:
    g = OpGraph()
    x = g.input("x", (4, 8), torch.float32)
    with pytest.raises(GraphError, match=r"^node 'e' \(extern\): ") as err:
        g.add("extern", [x], name="e", **attrs)
    assert message in str(err.value) and "\n" not in str(err.value)


_HOSTILE = (
    "import json, sys, torch\n"
    "from fusionsearch.errors import GraphError\n"
    "from fusionsearch.graph import load_graph\n"
    "before = dict(vars(torch.ops.aten)); mm = torch.ops.aten.mm\n"
    "refused = []\n"
    "for target, args in json.loads(sys.argv[1]):\n"
    "    spec = {'inputs': [{'name': 'x', 'shape': [4, 8], 'dtype': 'float32'}],\n"
    "            'nodes': [{'name': 'e', 'op': 'extern', 'inputs': ['x'],\n"
    "                       'attrs': {'target': target, 'args': args}}],\n"
    "            'outputs': ['e']}\n"
    "    open('hostile.json', 'w').write(json.dumps(spec))\n"
    "    try:\n"
    "        load_graph('hostile.json')\n"
    "    except GraphError as e:\n"
    "        refused.append(str(e))\n"
    "changed = sorted(k for k, v in before.items() if vars(torch.ops.aten).get(k) is not v)\n"
    "valid = {'inputs': [{'name': 'a', 'shape': [4, 8], 'dtype': 'float32'}, {'name': 'b', 'shape': [8, 2], "
    "'dtype': 'float32'}], 'nodes': [{'name': 'e', 'op': 'extern', 'inputs': ['a', 'b'], "
    "'attrs': {'target': 'aten.mm.default', 'args': [{'input': 0}, {'input': 1}]}}], 'outputs': ['e']}\n"
    "open('valid.json', 'w').write(json.dumps(valid))\n"
    "print(json.dumps({'refused': refused, 'changed': changed, 'mm_same': torch.ops.aten.mm is mm,\n"
    "                  'valid_shape': list(load_graph('valid.json').node('e').shape)}))\n"
)


def test_an_extern_target_is_looked_up_never_called_so_a_hostile_spec_cannot_change_torch(tmp_path: Path) -> None:
    """Item 14 of issue 53: 'aten.__setattr__' with args ["mm", 1] was called while the spec was checked, so
    torch.ops.aten.mm became 1 and every later valid spec was refused. Only registered overloads resolve."""
    hostile = [["aten.__setattr__", ["mm", 1]], ["aten.__setattr__.default", ["mm", 1]],
               ["aten.__delattr__", ["mm"]], ["aten.mm.__call__", [{"input": 0}]],
               ["aten.softmax.__init__", [{"input": 0}]], ["aten.mm", [{"input": 0}, {"input": 0}]],
               ["aten.__getitem__.t", [[1, 2], 0]], ["aten.no_such_op.default", [{"input": 0}]]]
    run = subprocess.run([sys.executable, "-c", _HOSTILE, json.dumps(hostile)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["changed"] == [] and got["mm_same"] is True
    assert got["valid_shape"] == [4, 2]
    assert len(got["refused"]) == len(hostile)
    for (target, _), message in zip(hostile, got["refused"], strict=True):
        assert "registered aten operator overload" in message or "must name an aten operator overload" in message, \
            (target, message)
        assert "\n" not in message


def test_an_extern_refusing_its_inputs_is_one_line_without_torchs_logged_traceback() -> None:
    """Issue 53 item 18: FakeTensorMode logged a 17-line traceback (an ERROR of torch._subclasses.fake_tensor) on
    stderr before the spec's one-line refusal. Run in a fresh process: torch's log handler writes to its stderr."""
    code = ("import torch, fusionsearch as fs\n"
            "g = fs.OpGraph()\n"
            "x = g.input('x', (3, 4), torch.float32)\n"
            "try:\n"
            "    g.add('extern', [x], name='y', target='aten.mm.default', args=[{'input': 0}, {'input': 0}])\n"
            "except fs.errors.GraphError as e:\n"
            "    print(e)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "extern aten.mm.default rejects its inputs x [3, 4] torch.float32: a and b must have same reduction " \
        "dim" in run.stdout
    assert "Traceback" not in run.stderr and "failed while attempting to run meta" not in run.stderr, run.stderr
