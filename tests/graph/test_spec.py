"""JSON graph specs: exact round trip, and refusals that name the node or field to fix."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from fusionsearch.datasets.workloads import WORKLOADS, workload
from fusionsearch.errors import GraphError, SpecError
from fusionsearch.graph import OpGraph, graph_from_dict, load_graph


def _save_load(g: OpGraph, path: Path) -> OpGraph:
    g.save(str(path))
    return load_graph(str(path))


def _write(tmp_path: Path, spec: Any, name: str = "g.json") -> str:
    path = tmp_path / name
    path.write_text(spec if isinstance(spec, str) else json.dumps(spec))
    return str(path)


# ---- round trip ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_workload_round_trip_is_exact(name: str, dtype: torch.dtype, tmp_path: Path) -> None:
    g = workload(name, dtype=dtype)
    back = _save_load(g, tmp_path / f"{name}.json")
    assert back.to_dict() == g.to_dict()
    assert back.same_structure(g) and g.same_structure(back)
    assert back.signature() == g.signature()
    assert back.outputs == g.outputs and back.inputs == g.inputs
    for node in g:  # names, inputs, attrs, shapes, dtypes and strides, node by node
        assert back.node(node.name) == node
    # Saving the loaded graph writes the same bytes: the spec is a fixed point.
    back.save(str(tmp_path / "again.json"))
    assert (tmp_path / "again.json").read_text() == (tmp_path / f"{name}.json").read_text()


def test_round_trip_keeps_strides_attrs_and_float_values(tmp_path: Path) -> None:
    g = OpGraph()
    w = g.input("w", (4, 3), "float16", strides=(1, 4))  # a transposed weight
    x = g.input("x", (2, 4), "float16")
    c = g.add("clamp", [x], name="c", min=-0.1, max=1e-300)
    s = g.add("mul", [c], name="s", scalar=0.1, scalar_first=True)
    i = g.add("add", [s], name="i", scalar=math.inf)
    g.set_outputs([g.add("mm", [i, w], name="y"), s])
    back = _save_load(g, tmp_path / "g.json")
    assert back.to_dict() == g.to_dict()
    assert back.node("w").strides == (1, 4)
    assert back.node("c").attrs == {"min": -0.1, "max": 1e-300}
    assert back.node("s").attrs == {"scalar": 0.1, "scalar_first": True}
    assert back.node("i").attrs["scalar"] == math.inf
    assert back.outputs == ["y", "s"]


HOSTILE = ['x"; import os; os.system("rm -rf /")', "a\nb", "import os", "tab\tname", "back\\slash", "{}[]",
           "ünïcødé ∑", "' or 1=1 --", "__import__('os')"]


def test_hostile_names_round_trip_unchanged(tmp_path: Path) -> None:
    g = OpGraph()
    a = g.input(HOSTILE[0], (2, 3), "float32")
    prev = a
    for name in HOSTILE[1:]:
        prev = g.add("relu", [prev], name=name)
    b = g.add("add", [prev, a], name="sum \"quoted\"")
    g.set_outputs([b, HOSTILE[1]])
    back = _save_load(g, tmp_path / "hostile.json")
    assert back.to_dict() == g.to_dict()
    assert [n.name for n in back] == [HOSTILE[0], *HOSTILE[1:], "sum \"quoted\""]
    assert back.node("sum \"quoted\"").inputs == (HOSTILE[-1], HOSTILE[0])
    assert back.outputs == ["sum \"quoted\"", "a\nb"]
    assert back.same_structure(g)


def test_nodes_listed_out_of_order_still_load(tmp_path: Path) -> None:
    g = workload("swiglu", M=2, D=8, H=16)
    spec = g.to_dict()
    spec["nodes"] = list(reversed(spec["nodes"]))
    back = load_graph(_write(tmp_path, spec))
    assert back.same_structure(g)
    for node in g:
        assert back.node(node.name) == node
    order = [n["name"] for n in back.to_dict()["nodes"]]  # saved again in dependency order
    assert order.index("gate") < order.index("gate_silu") < order.index("hidden") < order.index("y")


def test_shrinking_a_bf16_graph_for_the_interpreter_leaves_the_graph_itself_unchanged() -> None:
    """shrink edits a spec of the graph (sizes down, bfloat16 casts to float16); the graph it came from, which
    the search exports and saves as graph.json, keeps its own casts."""
    from fusionsearch.graph.shrink import shrink

    g = workload("w8_dequant_mm", dtype=torch.bfloat16, M=16, K=64, N=64)
    before = json.dumps(g.to_dict())
    small = shrink(g)
    assert small is not None and small.node("w_dequant").attrs["dtype"] == "float16"
    assert g.node("w_dequant").attrs["dtype"] == "bfloat16"
    assert json.dumps(g.to_dict()) == before
    assert graph_from_dict(json.loads(before)).same_structure(g)


# ---- refusals --------------------------------------------------------------------------------------

def _base() -> dict[str, Any]:
    return {
        "inputs": [{"name": "x", "shape": [2, 3], "dtype": "float32"},
                   {"name": "w", "shape": [3, 4], "dtype": "float32"}],
        "nodes": [{"name": "y", "op": "mm", "inputs": ["x", "w"]},
                  {"name": "z", "op": "relu", "inputs": ["y"]}],
        "outputs": ["z"],
    }


def test_base_spec_is_valid(tmp_path: Path) -> None:
    g = load_graph(_write(tmp_path, _base()))
    assert g.node("z").shape == (2, 4) and g.outputs == ["z"]


def test_malformed_json_gives_line_and_column(tmp_path: Path) -> None:
    path = _write(tmp_path, '{\n  "inputs": [],\n  "nodes": [,]\n}')
    with pytest.raises(SpecError) as err:
        load_graph(path)
    msg = str(err.value)
    assert msg.startswith(path) and "not valid JSON" in msg
    assert "line 3 column 13" in msg, msg


def test_missing_file_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"nope\.json: no such file"):
        load_graph(str(tmp_path / "nope.json"))


@pytest.mark.parametrize("field", ["inputs", "nodes", "outputs"])
def test_missing_top_level_field_is_named(field: str, tmp_path: Path) -> None:
    spec = _base()
    del spec[field]
    path = _write(tmp_path, spec)
    with pytest.raises(SpecError, match=rf"^{re.escape(path)}: missing field '{field}'$"):
        load_graph(path)


def _refusal(tmp_path: Path, spec: Any) -> tuple[type[Exception], str]:
    with pytest.raises((SpecError, GraphError)) as err:
        load_graph(_write(tmp_path, spec))
    return type(err.value), str(err.value)


def _edit(**changes: Any) -> dict[str, Any]:
    spec = _base()
    spec.update(changes)
    return spec


def _nodes(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    return [*_base()["nodes"], *extra]


# (case id, spec, error type, fragments that must all appear in the message)
BAD_SPECS: list[tuple[str, Any, type[Exception], list[str]]] = [
    ("not_an_object", [1, 2], SpecError, ["top level must be an object"]),
    ("unknown_top_field", _edit(extra=1), SpecError, ["unknown top-level field(s) ['extra']"]),
    ("bad_version", _edit(version=7), SpecError, ["spec version 7 is not supported"]),
    ("nodes_not_list", _edit(nodes={"y": 1}), SpecError, ["field 'nodes' must be a list"]),
    ("node_missing_op", _edit(nodes=_nodes({"name": "q", "inputs": ["z"]})), SpecError,
     ["node 'q'", "missing field 'op'"]),
    ("node_missing_inputs", _edit(nodes=_nodes({"name": "q", "op": "relu"})), SpecError,
     ["node 'q'", "missing field 'inputs'"]),
    ("node_missing_name", _edit(nodes=_nodes({"op": "relu", "inputs": ["z"]})), SpecError,
     ["nodes[2]", "missing field 'name'"]),
    ("node_name_not_string", _edit(nodes=_nodes({"name": ["q"], "op": "relu", "inputs": ["z"]})), SpecError,
     ["nodes[2]", "field 'name' must be a str"]),
    ("node_inputs_not_list", _edit(nodes=_nodes({"name": "q", "op": "relu", "inputs": "z"})), SpecError,
     ["node 'q'", "field 'inputs' must be a list"]),
    ("node_unknown_field", _edit(nodes=_nodes({"name": "q", "op": "relu", "inputs": ["z"], "args": 1})), SpecError,
     ["node 'q'", "unknown field(s) ['args']"]),
    ("unknown_op", _edit(nodes=_nodes({"name": "q", "op": "frobnicate", "inputs": ["z"]})), GraphError,
     ["node 'q'", "unknown op 'frobnicate'", "known ops: ", "add", "gelu", "mm", "where"]),
    ("shape_mismatch", _edit(nodes=_nodes({"name": "q", "op": "add", "inputs": ["z", "x"]})), GraphError,
     ["node 'q' (add)", "do not broadcast", "z [2, 4]", "x [2, 3]"]),
    ("mm_shape_mismatch", _edit(nodes=_nodes({"name": "q", "op": "mm", "inputs": ["z", "x"]})), GraphError,
     ["node 'q' (mm)", "z is [2, 4]", "x is [2, 3]"]),
    ("mm_dtype_mismatch",
     _edit(inputs=[{"name": "x", "shape": [2, 3], "dtype": "bfloat16"},
                   {"name": "w", "shape": [3, 4], "dtype": "float16"}],
           nodes=[{"name": "y", "op": "mm", "inputs": ["x", "w"]}], outputs=["y"]),
     GraphError, ["node 'y' (mm)", "x is torch.bfloat16", "w is torch.float16"]),
    ("cycle", _edit(nodes=_nodes({"name": "a", "op": "relu", "inputs": ["b"]},
                                 {"name": "b", "op": "relu", "inputs": ["a"]}), outputs=["a"]),
     GraphError, ["cycle a -> b -> a"]),
    ("self_loop", _edit(nodes=_nodes({"name": "a", "op": "relu", "inputs": ["a"]})), GraphError, ["cycle a -> a"]),
    ("dangling_input", _edit(nodes=_nodes({"name": "q", "op": "relu", "inputs": ["ghost"]})), GraphError,
     ["node 'q' reads 'ghost'", "dangling input"]),
    ("duplicate_node", _edit(nodes=_nodes({"name": "y", "op": "relu", "inputs": ["x"]})), GraphError,
     ["duplicate node name 'y'"]),
    ("node_named_like_input", _edit(nodes=_nodes({"name": "x", "op": "relu", "inputs": ["x"]})), GraphError,
     ["duplicate node name 'x'"]),
    ("duplicate_input", _edit(inputs=[*_base()["inputs"], {"name": "w", "shape": [1], "dtype": "float32"}]),
     GraphError, ["duplicate node name 'w'"]),
    ("unknown_dtype", _edit(inputs=[{"name": "x", "shape": [2, 3], "dtype": "float8"}, _base()["inputs"][1]]),
     GraphError, ["input 'x'", "unknown dtype 'float8'", "bfloat16"]),
    ("dtype_not_string", _edit(inputs=[{"name": "x", "shape": [2, 3], "dtype": 32}, _base()["inputs"][1]]),
     SpecError, ["input 'x'", "field 'dtype' must be a str"]),
    ("negative_size", _edit(inputs=[{"name": "x", "shape": [2, -3], "dtype": "float32"}, _base()["inputs"][1]]),
     GraphError, ["input 'x'", "positive integers", "[2, -3]"]),
    ("strides_do_not_match",
     _edit(inputs=[{"name": "x", "shape": [2, 3], "dtype": "float32", "strides": [1]}, _base()["inputs"][1]]),
     GraphError, ["input 'x'", "strides [1] do not match shape [2, 3]"]),
    ("bool_stride",
     _edit(inputs=[{"name": "x", "shape": [2, 3], "dtype": "float32", "strides": [True, 1]}, _base()["inputs"][1]]),
     GraphError, ["input 'x'", "strides [True, 1]"]),
    ("gelu_approximate_fast",
     _edit(nodes=_nodes({"name": "q", "op": "gelu", "inputs": ["z"], "attrs": {"approximate": "fast"}})), GraphError,
     ["node 'q' (gelu)", "'approximate' must be 'none' or 'tanh', got 'fast'"]),
    ("clamp_without_bounds", _edit(nodes=_nodes({"name": "q", "op": "clamp", "inputs": ["z"]})), GraphError,
     ["node 'q' (clamp)", "needs attr 'min' or 'max'"]),
    ("attrs_not_object", _edit(nodes=_nodes({"name": "q", "op": "clamp", "inputs": ["z"], "attrs": [1]})), SpecError,
     ["node 'q'", "field 'attrs' must be an object"]),
    ("wrong_arity", _edit(nodes=_nodes({"name": "q", "op": "relu", "inputs": ["z", "x"]})), GraphError,
     ["node 'q' (relu)", "takes 1 tensor inputs, got 2"]),
    ("output_not_a_node", _edit(outputs=["z", "nope"]), SpecError, ["output 'nope' is not a node"]),
    ("no_outputs", _edit(outputs=[]), SpecError, ["at least one output"]),
    # Issue 24: bad input that ended in a traceback, or was accepted.
    ("version_true", _edit(version=True), SpecError, ["spec version True is not supported"]),
    ("version_float", _edit(version=1.0), SpecError, ["spec version 1.0 is not supported"]),
    ("zero_size_input", _edit(inputs=[{"name": "x", "shape": [2, 0], "dtype": "float32"}, _base()["inputs"][1]]),
     GraphError, ["input 'x' has shape [2, 0] with a size-0 dim; fusionsearch tunes non-empty tensors only"]),
    ("zero_size_matmul",
     {"inputs": [{"name": "x", "shape": [2, 0], "dtype": "float32"},
                 {"name": "w", "shape": [0, 4], "dtype": "float32"}],
      "nodes": [{"name": "y", "op": "mm", "inputs": ["x", "w"]}], "outputs": ["y"]}, GraphError,
     ["input 'x' has shape [2, 0] with a size-0 dim"]),
    ("zero_size_result", _edit(nodes=_nodes({"name": "q", "op": "slice", "inputs": ["z"],
                                             "attrs": {"dim": 1, "start": 2, "end": 2}})), GraphError,
     ["node 'q' has shape [2, 0] with a size-0 dim"]),
    ("size_beyond_int64", _edit(inputs=[{"name": "x", "shape": [2, 2**64], "dtype": "float32"},
                                        _base()["inputs"][1]]), SpecError,
     ["at inputs[0].shape[1]: the integer 18446744073709551616 is outside int64"]),
    ("bytes_beyond_int64", _edit(inputs=[{"name": "x", "shape": [2**40, 2**40], "dtype": "float32"},
                                         _base()["inputs"][1]]), GraphError,
     ["input 'x'", "more bytes than int64"]),
    ("expand_beyond_int64", _edit(nodes=_nodes({"name": "q", "op": "expand", "inputs": ["z"],
                                                "attrs": {"shape": [2**62, 2**62, 2, 4]}})), GraphError,
     ["node 'q' (expand)", "more bytes than int64"]),
    ("too_many_dims", _edit(inputs=[{"name": "x", "shape": [1] * 17, "dtype": "float32"}, _base()["inputs"][1]]),
     GraphError, ["input 'x'", "17 dims; at most 16"]),
    ("float_size", _edit(inputs=[{"name": "x", "shape": [2, 3.0], "dtype": "float32"}, _base()["inputs"][1]]),
     GraphError, ["input 'x'", "positive integers", "[2, 3.0]"]),
    ("scalar_beyond_int64", _edit(nodes=_nodes({"name": "q", "op": "add", "inputs": ["z"],
                                                "attrs": {"scalar": -2**63 - 1}})), SpecError,
     ["at nodes[2].attrs.scalar: the integer -9223372036854775809 is outside int64"]),
    ("deep_attrs", _edit(nodes=_nodes({"name": "q", "op": "relu", "inputs": ["z"],
                                       "attrs": {"deep": json.loads("[" * 40 + "]" * 40)}})), SpecError,
     ["at nodes[2].attrs.deep[0]", "nested more than 32 levels deep"]),
    ("surrogate_name", _edit(nodes=_nodes({"name": "q\ud800", "op": "relu", "inputs": ["z"]})), SpecError,
     ["at nodes[2].name: the string 'q\\ud800' is not valid Unicode"]),
    ("output_not_a_string", _edit(outputs=[["z"]]), SpecError, ["output ['z'] is not a node"]),
    ("node_input_not_a_string", _edit(nodes=_nodes({"name": "q", "op": "relu", "inputs": [["z"]]})), GraphError,
     ["node 'q' (relu)", "input ['z'] is not a node"]),
    ("unknown_input_field", _edit(inputs=[{"name": "x", "shape": [2, 3], "dtype": "float32", "stride": [3, 1]},
                                          _base()["inputs"][1]]), SpecError,
     ["input 'x'", "unknown field(s) ['stride']"]),
    ("cycle_with_odd_names", _edit(nodes=_nodes({"name": "a\nb", "op": "relu", "inputs": ["c"]},
                                                {"name": "c", "op": "relu", "inputs": ["a\nb"]}), outputs=["c"]),
     GraphError, ["cycle a\\nb -> c -> a\\nb"]),
]


@pytest.mark.parametrize(("spec", "kind", "fragments"), [c[1:] for c in BAD_SPECS], ids=[c[0] for c in BAD_SPECS])
def test_bad_spec_is_refused_with_a_useful_message(spec: Any, kind: type[Exception], fragments: list[str],
                                                   tmp_path: Path) -> None:
    got, msg = _refusal(tmp_path, spec)
    assert got is kind, f"{got.__name__}: {msg}"
    for fragment in fragments:
        assert fragment in msg, f"{fragment!r} missing from: {msg}"
    assert "\n" not in msg  # one line, as the CLI prints it


# ---- issue 24: input that once ended in a traceback --------------------------------------------------

def test_attrs_named_like_the_add_arguments_are_plain_attributes(tmp_path: Path) -> None:
    """'name', 'op' and 'inputs' in a node's attrs collided with OpGraph.add's own arguments (a TypeError)."""
    attrs = {"name": "n", "op": "add", "inputs": ["w"], "approximate": "tanh"}
    g = load_graph(_write(tmp_path, _edit(nodes=_nodes({"name": "q", "op": "gelu", "inputs": ["z"], "attrs": attrs}),
                                          outputs=["q"])))
    assert g.node("q").attrs == attrs and g.node("q").inputs == ("z",) and g.node("q").op == "gelu"
    assert _save_load(g, tmp_path / "again.json").to_dict() == g.to_dict()
    h = OpGraph()
    x = h.input("x", (2, 3), "float32")
    assert h.node(h.add("gelu", [x], op="add", inputs=["x"])).attrs == {"op": "add", "inputs": ["x"]}
    assert h.node(h.add_op("relu", [x], {"name": "r"}, name="named")).attrs == {"name": "r"}


def test_an_empty_matmul_or_graph_is_refused_before_the_cost_model_divides_by_zero() -> None:
    g = OpGraph()
    x, w = g.input("x", (2, 0), "float32"), g.input("w", (0, 4), "float32")
    with pytest.raises(GraphError, match=r"^node 'y' \(mm\): a matmul over x \[2, 0\], w \[0, 4\] has a size-0 dim"):
        g.add("mm", [x, w], name="y")
    r = g.add("relu", [x], name="r")  # shape rules handle size 0 as torch does; a finished graph may not hold it
    assert g.node(r).shape == (2, 0)
    with pytest.raises(GraphError, match=r"^'x' has shape \[2, 0\] with a size-0 dim"):
        g.set_outputs([r])
    assert g.outputs == []


@pytest.mark.parametrize("depth", [40, 5_000, 200_000])
def test_deeply_nested_json_is_refused_before_any_recursion(depth: int, tmp_path: Path) -> None:
    text = '{"inputs": [], "nodes": [], "outputs": ["x"], "version": ' + "[" * depth + "]" * depth + "}"
    path = _write(tmp_path, text)
    with pytest.raises(SpecError, match=r"nested (too deeply|more than 32 levels deep)") as err:
        load_graph(path)
    assert str(err.value).startswith(path) and "\n" not in str(err.value)


def test_an_integer_past_pythons_digit_limit_is_a_spec_error(tmp_path: Path) -> None:
    path = _write(tmp_path, '{"inputs": [{"name": "x", "shape": [' + "9" * 5000 + '], "dtype": "float32"}]}')
    with pytest.raises(SpecError, match=r"not valid JSON \(Exceeds the limit \(4300 digits\)"):
        load_graph(path)
    spec = _edit(inputs=[{"name": "x", "shape": [10**5000], "dtype": "float32"}, _base()["inputs"][1]])
    with pytest.raises(SpecError, match=r"at inputs\[0\]\.shape\[0\]: the integer <an integer of 16610 bits> is "
                                        "outside int64"):
        graph_from_dict(spec)
    g = OpGraph()
    for i, bad in enumerate((10**5000, 2**64)):
        with pytest.raises(GraphError, match=r"^input 'x': shape \[.*\] of float32 holds more bytes than int64"):
            g.input("x", (bad,), "float32")
        with pytest.raises(GraphError, match=r"node 'a' \(add\): bad attribute value: at scalar: the integer"):
            g.add("add", [g.input(f"y{i}", (2,), "float32")], name="a", scalar=bad)


# ---- issue 53 item 13: sizes whose tensors cannot exist ----------------------------------------------

_TOO_BIG = "more than this machine's memory"


@pytest.mark.parametrize(("name", "spec", "fragment"), [
    ("strides", _edit(inputs=[{"name": "x", "shape": [2, 3], "dtype": "float32", "strides": [2**40, 1]},
                              _base()["inputs"][1]]), "input 'x': strides [1099511627776, 1] over shape [2, 3] needs"),
    ("sizes", _edit(inputs=[{"name": "x", "shape": [2**21, 2**20], "dtype": "float32"},
                            {"name": "w", "shape": [2**20, 4], "dtype": "float32"}]),
     "input 'x': shape [2097152, 1048576] of float32 needs 8,796.1 GB"),
    ("output", _edit(nodes=_nodes({"name": "q", "op": "expand", "inputs": ["z"], "attrs": {"shape": [2**38, 2, 4]}}),
                     outputs=["q"]), "output 'q': shape [274877906944, 2, 4] of float32 needs"),
], ids=lambda v: v if isinstance(v, str) and " " not in v else "")
def test_a_spec_whose_tensors_cannot_exist_is_refused_when_checked(name: str, spec: Any, fragment: str,
                                                                     tmp_path: Path) -> None:
    """Such a spec (an input spanning 541 GB) was accepted, then a search died in torch's allocator. Inputs and
    outputs only: an intermediate need not exist (a plan fusing moe_ffn's gather never writes its [T, 2, H, D])."""
    got, msg = _refusal(tmp_path, spec)
    assert got in (GraphError, SpecError), f"{got.__name__}: {msg}"  # the loader names an output's as the spec's
    assert fragment in msg and _TOO_BIG in msg and "\n" not in msg, msg


def test_the_memory_bound_asks_the_gpu_only_past_the_hosts_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    from fusionsearch.graph import capacity

    asked: list[int] = []
    monkeypatch.setattr(capacity, "host_bytes", lambda: 4096)
    monkeypatch.setattr(capacity, "gpu_bytes", lambda: asked.append(1) or 0)
    g = OpGraph()
    g.input("small", (32, 32), "float32")  # exactly the host's 4096 bytes: the GPU is not asked
    assert asked == []
    with pytest.raises(GraphError, match=r"^input 'big': shape \[33, 32\] of float32 needs 4,224 bytes, more than "
                                         r"this machine's memory \(4,096 bytes\)"):
        g.input("big", (33, 32), "float32")
    assert asked == [1]
    monkeypatch.setattr(capacity, "gpu_bytes", lambda: 300_000)  # a GPU larger than the host holds it
    assert g.input("big", (33, 32), "float32") == "big"
    with pytest.raises(GraphError, match=r"strides \[64, 1\] over shape \[2000, 32\] needs 511,872 bytes, more "
                                         r"than this machine's memory \(300,000 bytes\)"):
        g.input("wide", (2000, 32), "float32", strides=(64, 1))


def test_a_spec_that_is_not_utf8_is_a_spec_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes(json.dumps(_base()).replace('"z"', '"z\u00e9"').encode("latin-1")[:-1] + b"\xe9}")
    with pytest.raises(SpecError, match=r"latin1\.json: not UTF-8 text \(byte 0xe9 at offset \d+\)"):
        load_graph(str(path))
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(_base()).encode())
    assert load_graph(str(bom)).outputs == ["z"]


def test_a_node_name_with_a_lone_surrogate_is_refused(tmp_path: Path) -> None:
    g = OpGraph()
    with pytest.raises(GraphError, match=r"a node name 'x\\udc80' is not valid Unicode"):
        g.input("x\udc80", (2,), "float32")
    x = g.input("x", (2,), "float32")
    with pytest.raises(GraphError, match="not valid Unicode"):
        g.add("relu", [x], name="\ud800")
    with pytest.raises(GraphError, match="not valid Unicode"):
        g.add("gelu", [x], approximate="\ud800")


def test_unreadable_or_unwritable_paths_are_spec_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r": cannot read \("):
        load_graph(str(tmp_path))  # a directory
    g = load_graph(_write(tmp_path, _base()))
    with pytest.raises(SpecError, match=r"cannot write the graph spec"):
        g.save(str(tmp_path / "no" / "such" / "dir.json"))
    with pytest.raises(SpecError, match=r"^x\\ny\.json: no such file$"):
        load_graph("x\ny.json")
    for path in ("nul\0byte.json", None):
        with pytest.raises(SpecError, match=r": cannot read \((ValueError|TypeError)\)$"):
            load_graph(path)  # type: ignore[arg-type]
        with pytest.raises(SpecError, match=r": cannot write the graph spec \((ValueError|TypeError)\)$"):
            g.save(path)  # type: ignore[arg-type]


def test_python_values_that_are_not_json_are_refused() -> None:
    g = OpGraph()
    x = g.input("x", (2,), "float32")
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    for attrs, message in (({"scalar": object()}, "of type object is not a JSON value"),
                           ({"scalar": cyclic}, "nested more than 32 levels"),
                           ({"table": {1: 2}}, "the key 1 is not a string")):
        with pytest.raises(GraphError, match=message):
            g.add("add", [x], **attrs)
    with pytest.raises(GraphError, match=r"unknown op \['relu'\]"):
        g.add(["relu"], [x])  # type: ignore[arg-type]
    with pytest.raises(GraphError, match="at least one output"):
        g.set_outputs("x")  # type: ignore[arg-type]


def test_a_long_chain_listed_backwards_loads_without_recursion() -> None:
    """The loader's cycle check and ordering once recursed once per node (a RecursionError at ~1,000)."""
    g = OpGraph()
    prev = g.input("x", (2, 3), "float32")
    for i in range(5_000):
        prev = g.add("relu" if i % 2 else "neg", [prev], name=f"n{i}")
    g.set_outputs([prev])
    spec = g.to_dict()
    spec["nodes"].reverse()
    back = graph_from_dict(spec)
    assert back.to_dict() == g.to_dict() and back.same_structure(g)
    spec["nodes"][-1]["inputs"] = ["n4999"]  # n0 reads n4999: a cycle through all 5,000 nodes, named in one line
    with pytest.raises(GraphError, match=r"^spec: the graph has a cycle n4999 -> n0 -> n1 -> n2 -> \.\.\. "
                                         r"\(4994 more\) -> n4997 -> n4998 -> n4999; a node cannot depend on itself$"):
        graph_from_dict(spec)


def test_graph_from_dict_names_its_source() -> None:
    spec = _edit(nodes=_nodes({"name": "q", "op": "frobnicate", "inputs": ["z"]}))
    with pytest.raises(GraphError, match=r"^my_model: node 'q': unknown op 'frobnicate'"):
        graph_from_dict(spec, "my_model")


def test_an_intermediate_larger_than_memory_is_accepted_where_no_plan_need_write_it() -> None:
    from fusionsearch.datasets.workloads import workload as build

    g = build("moe_ffn", T=512)  # its gathered expert weights: [512, 2, 14336, 4096] bf16, 120 GB
    assert max(n.nbytes for n in g) > 100e9 and g.outputs
