"""A seeded fuzzer over what users hand fusionsearch: graph specs (as dicts and as files), plan JSON (as dicts and
text) and the Python API that builds graphs and tile configs (issue 24); and over the files it reads back (issue
53): cost-model files (their JSON record and their arrays' values) and plan-cache entries (their record, their
text, a directory, a FIFO or a device in their place).

Valid inputs (the built-in workloads at small sizes, a graph of every op family, their reference plans) are
mutated: keys dropped, renamed, duplicated; values replaced by huge, negative, zero, float, bool, None, string,
list and object values, or nested deeply; unknown ops, cycles, dangling inputs; and, as bytes, text that is not
UTF-8, truncated, with lone surrogates, 5,000-digit numbers or 100,000 levels of brackets. An input that loads is
taken on: the heuristic plan, its JSON round trip, the cost model, the generated source.

Each case may only succeed or raise one of the package's FusionSearchError types with a non-empty one-line
message that prints as UTF-8. Anything else (another exception type, a RecursionError, a MemoryError, a case over
CASE_SECONDS, the process growing by more than MEMORY_GROWTH_MB) fails the test with the cases that did it.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import reprlib
import resource
import shutil
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.module import generate_module
from fusionsearch.costmodel import estimate
from fusionsearch.errors import FusionSearchError
from fusionsearch.graph import OpGraph, graph_from_dict, load_graph
from fusionsearch.graph.registry import ops_of_kind

SEED = 24
CASES = {"spec dict": 800, "spec file": 400, "plan dict": 500, "plan text": 300, "python api": 300}
CASE_SECONDS = 5.0  # one case: far above any legitimate one (milliseconds), far below a hang
MEMORY_GROWTH_MB = 1024  # the whole run: nothing allocates tensors, so growth is Python objects only

SMALL = {"w8_dequant_mm": {"M": 5, "K": 40, "N": 24}, "gather_mm": {"M": 7, "K": 40, "N": 24, "T": 50},
         "mm_bias_gelu": {"M": 5, "K": 40, "N": 24}, "cast_mm": {"M": 5, "K": 40, "N": 24},
         "scale_mm": {"M": 5, "K": 40, "N": 24}, "swiglu": {"M": 5, "D": 40, "H": 24}}


class CaseTimeout(BaseException):  # noqa: N818 - a BaseException, so that no `except Exception` swallows it
    """A case ran past CASE_SECONDS."""


def _every_family() -> OpGraph:
    """One graph holding every kind of node: layout ops, a gather, an extern, clamp/where/cast, addmm, bmm, linear."""
    g = OpGraph()
    x, w = g.input("x", (6, 16), torch.float16), g.input("w", (16, 8), torch.float16)
    b, t = g.input("b", (8,), torch.float16), g.input("t", (12, 16), torch.float16)
    idx = g.input("idx", (6,), torch.int64)
    rows = g.add("index_select", [t, idx], name="rows")
    xs = g.add("add", [x, rows], name="xs")
    y = g.add("addmm", [b, xs, w], name="y", beta=1, alpha=0.5)
    sm = g.add("extern", [y], name="sm", target="aten.softmax.int", args=[{"input": 0}, -1])
    cl = g.add("clamp", [sm], name="cl", min=-1.0, max=2)
    pos = g.add("gt", [cl], name="pos", scalar=0.0)
    wh = g.add("where", [pos, cl], name="wh", scalar=0.25)
    tr = g.add("transpose", [wh], name="tr", dim0=0, dim1=1)
    v = g.add("view", [tr], name="v", shape=[2, 4, 6])
    u = g.add("slice", [v], name="u", dim=2, start=1, end=5, step=2)
    e = g.add("expand", [g.add("unsqueeze", [b], name="bu", dim=0)], name="be", shape=[6, 8])
    lin = g.add("linear", [g.add("cast", [xs], name="xf", dtype="float32"),
                           g.add("cast", [g.add("permute", [w], name="wt", dims=[1, 0])], name="wf", dtype="float32")],
                name="lin")
    bm = g.add("bmm", [u, g.input("r", (2, 2, 3), torch.float16)], name="bm")
    g.set_outputs([g.add("gelu", [g.add("mul", [e, y], name="ey")], name="out", approximate="tanh"), bm, lin])
    return g


def _bases() -> list[OpGraph]:
    graphs = [fs.workload(name, dtype=dt, **SMALL[name])
              for name, dt in zip(sorted(SMALL), [torch.float16, torch.bfloat16, torch.float32] * 2, strict=True)]
    return [*graphs, _every_family()]


# ---- mutations ---------------------------------------------------------------------------------------------

OP_NAMES = ["frobnicate", "", "input", "extern", "ADD", "relu ", *ops_of_kind("pointwise"), *ops_of_kind("template"),
            *ops_of_kind("layout"), *ops_of_kind("indexing")]
KEYS = ["name", "op", "inputs", "attrs", "shape", "dtype", "strides", "version", "kind", "config", "nodes", "node",
        "matmul", "epilogue", "prologue_a", "recompute", "graph", "kernels", "outputs", "target", "args", "scalar",
        "block_m", "split_k", "num_warps", "zzz"]
SCALARS: list[Any] = [0, -1, 1, 2, 3, 16, 48, 256, 2**20, 2**31, 2**62, 2**63 - 1, 2**63, 2**64, 2**70, -2**63 - 1,
                      10**30, 10**5000, 0.0, -0.0, 1.5, 1e308, math.nan, math.inf, -math.inf, True, False, None, "",
                      "x", "y", "n0", "float16", "bfloat16", "int8", "bool", "aten.softmax.int", "aten.full.default",
                      "\ud800", "a\nb", "\U0001f4a5", "'; import os", "ghost"]
CONTAINERS: list[Any] = [[], [0], [1, 1], [2, 0], [2**40, 2**40], [2**64], [[1]], ["x"], ["x", "x"], [True], [1.5],
                         {}, {"input": 0}, {"input": True}, {"dtype": "float32"}, {"a": 1}, {"name": "q"}]


def _value(rng: random.Random) -> Any:
    v = rng.choice(SCALARS + CONTAINERS)
    return copy.deepcopy(v)


def _label(value: Any) -> str:
    """A case's value for the report, whatever it holds (reprlib itself fails on a 5,000-digit integer)."""
    try:
        return reprlib.repr(value)
    except ValueError:
        return "<a value holding an integer too long to print>"


def _nest(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = [value]
    return value


def _slots(obj: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) inside `obj`, walked without recursion."""
    out, stack = [], [obj]
    while stack:
        c = stack.pop()
        items = list(c.items()) if isinstance(c, dict) else list(enumerate(c)) if isinstance(c, list) else []
        for k, v in items:
            out.append((c, k))
            stack.append(v)
    return out


def _entries(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in spec.get("nodes", []) if isinstance(e, dict)] if isinstance(spec.get("nodes"), list) else []


def mutate(obj: Any, rng: random.Random) -> tuple[Any, str]:
    """One to three random edits of a JSON-like value; returns it with a short description."""
    obj = copy.deepcopy(obj)
    done = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        slots = _slots(obj)
        if not slots:
            break
        c, k = rng.choice(slots)
        move = rng.choice(["replace", "replace", "replace", "drop", "rename", "duplicate", "nest", "graph"])
        if move == "replace":
            c[k] = _value(rng)
        elif move == "drop":
            del c[k]
        elif move == "rename" and isinstance(c, dict):
            c[rng.choice(KEYS)] = c.pop(k)
        elif move == "duplicate" and isinstance(c, list):
            c.insert(rng.randrange(len(c) + 1), c[k])  # shared, not copied: it may be nested 900 deep
        elif move == "nest":
            c[k] = _nest(c[k], rng.choice([2, 33, 40, 300, 900]))
        elif move == "graph" and isinstance(obj, dict) and _entries(obj):
            move = _graph_edit(obj, rng)
        else:
            move = "none"
        done.append(move)
    return obj, "+".join(done)


def _graph_edit(spec: dict[str, Any], rng: random.Random) -> str:
    """Edits that keep the JSON well formed but break the graph: cycles, dangling inputs, unknown ops, sizes."""
    nodes = _entries(spec)
    i = rng.randrange(len(nodes))
    e = nodes[i]
    kind = rng.choice(["cycle", "self", "dangling", "op", "size", "dtype", "dup name", "attr key"])
    names = [n.get("name") for n in nodes]
    if kind == "cycle" and isinstance(e.get("inputs"), list) and e["inputs"]:
        e["inputs"][0] = names[rng.randrange(i, len(nodes))]
    elif kind == "self" and isinstance(e.get("inputs"), list):
        e["inputs"].append(e.get("name"))
    elif kind == "dangling" and isinstance(e.get("inputs"), list):
        e["inputs"].append("ghost")
    elif kind == "op":
        e["op"] = rng.choice(OP_NAMES)
    elif kind == "size" and isinstance(spec.get("inputs"), list) and spec["inputs"]:
        entry = rng.choice(spec["inputs"])
        if isinstance(entry, dict) and isinstance(entry.get("shape"), list) and entry["shape"]:
            entry["shape"][rng.randrange(len(entry["shape"]))] = rng.choice([0, -3, 2**31, 2**62, 2**64, 1.0, True])
    elif kind == "dtype" and isinstance(spec.get("inputs"), list) and spec["inputs"]:
        entry = rng.choice(spec["inputs"])
        if isinstance(entry, dict):
            entry["dtype"] = rng.choice(["float8", "int4", "complex64", "float64", "bool", "int8", "fp16", 16])
    elif kind == "dup name":
        e["name"] = rng.choice(names + ["x", "w"])
    elif kind == "attr key":
        e.setdefault("attrs", {})
        if isinstance(e["attrs"], dict):
            e["attrs"][rng.choice(["name", "op", "inputs", "attrs", "scalar", "dtype", "shape"])] = _value(rng)
    return kind


def mutate_text(text: str, rng: random.Random) -> tuple[bytes, str]:
    """A byte-level edit of JSON text: encodings, truncation, deep brackets, huge numbers, surrogates, junk."""
    data = text.encode()
    at = rng.randrange(len(data) + 1)
    kind = rng.choice(["not utf8", "utf16", "latin1", "truncate", "brackets", "digits", "surrogate", "dup key",
                       "bom", "flip", "nul"])
    if kind == "not utf8":
        data = data[:at] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80\x80"]) + data[at:]
    elif kind == "utf16":
        data = text.encode(rng.choice(["utf-16", "utf-16-le", "utf-32"]))
    elif kind == "latin1":
        data = text.replace('"', '"\u00e9', 1).encode("latin-1", "replace")
    elif kind == "truncate":
        data = data[:at]
    elif kind == "brackets":
        depth = rng.choice([33, 900, 5_000, 100_000])
        data = _replace_value(data, rng, b"[" * depth + b"]" * depth)
    elif kind == "digits":
        big = [b"9" * 5000, b"-" + b"9" * 4301, b"1e999999", b"18446744073709551616"]
        data = _replace_value(data, rng, rng.choice(big))
    elif kind == "surrogate":
        data = data.replace(b'"', b'"\\ud800', 1 + rng.randrange(3))
    elif kind == "dup key":
        data = data.replace(b"{", b'{"name": "dup", "op": "relu", ', 1)
    elif kind == "bom":
        data = b"\xef\xbb\xbf" + data
    elif kind == "flip":
        buf = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            if buf:
                buf[rng.randrange(len(buf))] = rng.randrange(256)
        data = bytes(buf)
    else:
        data = data[:at] + b"\x00" + data[at:]
    return data, kind


def _replace_value(data: bytes, rng: random.Random, new: bytes) -> bytes:
    """`data` with the value after a random ': ' (or a random number) replaced by `new`."""
    colons = [i for i in range(len(data) - 1) if data[i:i + 2] == b": "]
    if not colons:
        return new
    i = rng.choice(colons) + 2
    end = i
    while end < len(data) and data[end:end + 1] not in (b",", b"}", b"\n"):
        end += 1
    return data[:i] + new + data[end:]


# ---- running cases -----------------------------------------------------------------------------------------

@dataclass
class Tally:
    """What the run saw: outcomes by kind of input and error type, and the cases that broke the rules."""

    outcomes: Counter[str]
    by_source: Counter[str]
    bad: list[str]


def _take_on_graph(g: OpGraph) -> None:
    """A graph that loaded goes on through the stages a user's would: spec, plans, JSON, cost model, source."""
    assert graph_from_dict(g.to_dict()).signature() == g.signature()
    for plan in (P.heuristic(g), P.fully_fused(g)):
        assert P.Plan.from_json(plan.to_json(), g) == plan
        _take_on_plan(plan)


def _take_on_plan(plan: P.Plan) -> None:
    assert estimate(plan).time_us > 0
    assert generate_module(plan).source


def _timeout(signum: int, frame: FrameType | None) -> None:
    raise CaseTimeout()


def _run(tally: Tally, source: str, label: str, case: Callable[[], object]) -> None:
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        case()
        tally.outcomes["accepted"] += 1
        tally.by_source[f"{source}: accepted"] += 1
    except FusionSearchError as e:
        msg = str(e)
        name = type(e).__name__
        tally.outcomes[name] += 1
        tally.by_source[f"{source}: {name}"] += 1
        try:
            msg.encode("utf-8")
        except UnicodeEncodeError:
            tally.bad.append(f"{source} [{label}]: {name} message is not UTF-8: {msg!r:.300}")
        if not msg or "\n" in msg or "\r" in msg:
            tally.bad.append(f"{source} [{label}]: {name} message is not one line: {msg!r:.300}")
    except CaseTimeout:
        tally.bad.append(f"{source} [{label}]: ran past {CASE_SECONDS} s")
    except BaseException as e:  # noqa: BLE001 - the finding: anything but the package's own errors
        if isinstance(e, KeyboardInterrupt):
            raise
        tally.bad.append(f"{source} [{label}]: {type(e).__name__}: {str(e)[:300]!r}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _spec_cases(rng: random.Random, bases: list[OpGraph], tmp: Path, tally: Tally) -> Iterator[None]:
    specs = [g.to_dict() for g in bases]
    for _ in range(CASES["spec dict"]):
        spec, how = mutate(rng.choice(specs), rng)
        _run(tally, "spec dict", how, lambda spec=spec: _take_on_graph(graph_from_dict(spec, "fuzz")))
        yield
    for i in range(CASES["spec file"]):
        data, how = mutate_text(json.dumps(rng.choice(specs), indent=rng.choice([None, 1])), rng)
        path = tmp / f"spec{i}.json"
        path.write_bytes(data)
        _run(tally, "spec file", how, lambda path=path: _take_on_graph(load_graph(str(path))))
        yield


def _plan_cases(rng: random.Random, bases: list[OpGraph], tally: Tally) -> Iterator[None]:
    plans = [maker(g) for g in bases for maker in (P.heuristic, P.unfused)]
    for _ in range(CASES["plan dict"]):
        plan = rng.choice(plans)
        data, how = mutate(plan.to_dict(), rng)
        _run(tally, "plan dict", how, lambda data=data, g=plan.graph: _take_on_plan(P.Plan.from_dict(data, g)))
        yield
    for _ in range(CASES["plan text"]):
        plan = rng.choice(plans)
        data, how = mutate_text(plan.to_json(), rng)
        text = data if rng.random() < 0.5 else data.decode("utf-8", "surrogateescape")
        _run(tally, "plan text", how, lambda text=text, g=plan.graph: _take_on_plan(P.Plan.from_json(text, g)))
        yield


def _api_cases(rng: random.Random, tally: Tally) -> Iterator[None]:
    """The Python API with the same hostile values: graph inputs, nodes and attributes, tile configs."""
    fields = list(asdict(P.TileConfig()))
    for _ in range(CASES["python api"]):
        which = rng.choice(["input", "add", "tile", "tile"])
        if which == "input":
            shape = rng.choice([_value(rng), [rng.choice(SCALARS), 4], [2] * rng.choice([1, 16, 17, 100])])
            args = (rng.choice(["x", "", "\udc80", "a\nb", 7]), shape, rng.choice(["float16", "fp8", None, 3]),
                    rng.choice([None, None, _value(rng)]))
            _run(tally, "python api", f"input{_label(args)}", lambda args=args: OpGraph().input(*args))
        elif which == "add":
            op = rng.choice(OP_NAMES)
            attrs = {rng.choice(KEYS): _value(rng) for _ in range(rng.randrange(4))}
            arity, name = rng.choice([0, 1, 2]), rng.choice([None, "n"])

            def build(op: str = op, attrs: dict[str, Any] = attrs, arity: int = arity, name: str | None = name) -> None:
                g = OpGraph()
                x = g.input("x", (4, 8), "float16")
                w = g.input("w", (8, 4), "float16")
                g.add_op(op, [x, w][:arity], attrs, name=name)

            _run(tally, "python api", f"add {op!r} {_label(attrs)}", build)
        else:
            cfg = {k: rng.choice([_value(rng), 2 ** rng.randrange(0, 72), rng.randrange(-3, 300)])
                   for k in rng.sample(fields, rng.randrange(1, 4))}
            _run(tally, "python api", f"TileConfig {_label(cfg)}", lambda cfg=cfg: P.TileConfig(**cfg))
        yield


def test_fuzzed_inputs_succeed_or_raise_one_line_package_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                record_property: Callable[[str, object], None]
                                                                ) -> None:
    rng = random.Random(SEED)
    bases = _bases()
    tally = Tally(Counter(), Counter(), [])
    previous = signal.signal(signal.SIGALRM, _timeout)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    try:
        for _ in _spec_cases(rng, bases, tmp_path, tally):
            pass
        for _ in _plan_cases(rng, bases, tally):
            pass
        for _ in _api_cases(rng, tally):
            pass
    finally:
        signal.signal(signal.SIGALRM, previous)
    seconds = time.perf_counter() - start
    growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    total = sum(tally.outcomes.values()) + len(tally.bad)
    counts = dict(sorted(tally.outcomes.items()))
    record_property("fuzz_counts", counts)
    with capsys.disabled():
        print(f"\nfuzz: {total} cases in {seconds:.1f} s (seed {SEED}), peak memory +{growth_mb:.0f} MB: {counts}")
        print("fuzz by input: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.by_source.items())))
        if tally.bad:
            kinds = Counter(line.split("]: ", 1)[-1].split(":")[0] for line in tally.bad)
            print(f"fuzz BROKE the rules in {len(tally.bad)} cases: {dict(kinds.most_common())}")
        for line in tally.bad[:20]:
            print("fuzz BROKE:", line)
    assert not tally.bad, f"{len(tally.bad)} cases broke the rules; first: {tally.bad[:5]}"
    assert total == sum(CASES.values()) >= 500
    assert tally.outcomes["accepted"] >= 50  # mutations that keep the input valid still go all the way through
    for kind in ("SpecError", "GraphError", "PlanError"):
        assert tally.outcomes[kind] >= 20, (kind, counts)
    assert growth_mb < MEMORY_GROWTH_MB


# ---- model files and plan-cache entries (issue 53: validated down to their values) ---------------------------

FILE_CASES = {"model meta": 80, "model text": 40, "model values": 140, "cache record": 200, "cache text": 100,
              "cache file": 20}
HOSTILE_FLOATS = [math.nan, math.inf, -math.inf, 1e300, -1e300, 1e30, 60.0, -60.0, 0.0, -0.0, 5e-324, 1.0]
HOSTILE_INTS = [-1, 0, 1, 2, 2**31 - 1, -2**31, 7, 1000]


def _dumps(obj: Any) -> str:
    """JSON text of a mutated value, a 5,000-digit integer included (what a hostile file may hold)."""
    limit, depth = sys.get_int_max_str_digits(), sys.getrecursionlimit()
    sys.set_int_max_str_digits(0)
    sys.setrecursionlimit(max(depth, 20_000))  # nested 900 levels inside one another, several times
    try:
        return json.dumps(obj)
    finally:
        sys.set_int_max_str_digits(limit)
        sys.setrecursionlimit(depth)


def _small_model(tmp: Path) -> tuple[str, Any]:
    """A tiny fitted cost model saved as .npz (every group of regressors present) and rows to predict."""
    import numpy as np

    from fusionsearch.costmodel import H200
    from fusionsearch.costmodel.features import ANALYTIC_FEATURE, COMPILED_FEATURES, FEATURE_NAMES
    from fusionsearch.costmodel.learned import LearnedCostModel

    rng = np.random.default_rng(SEED)
    col = {name: i for i, name in enumerate(FEATURE_NAMES)}
    X = rng.uniform(1, 10, size=(300, len(FEATURE_NAMES)))
    groups = rng.integers(0, 8, 300)
    X[:, col["kind_template"]] = rng.random(300) < 0.6
    X[:, col["a_bits"]] = X[:, col["b_bits"]] = np.where(groups < 2, 32.0, 16.0)
    compiled = col[COMPILED_FEATURES[0]]
    X[:, compiled] = np.where(rng.random(300) < 0.5, np.nan, X[:, compiled])
    y = X[:, col[ANALYTIC_FEATURE]] * rng.uniform(0.5, 2.0, 300)
    model = LearnedCostModel(max_iter=4, n_bags=2, min_samples_leaf=5).fit(X, y, hardware=H200, groups=groups)
    record = {**H200.to_dict(), "profile": H200.to_dict()}  # as a collected model records its GPU
    model.set_hardware(record)
    return model.save(str(tmp / "model.npz")), X


def _npz_arrays(path: str) -> dict[str, Any]:
    import numpy as np

    with np.load(path, allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def _write_npz(path: Path, arrays: dict[str, Any]) -> str:
    import numpy as np

    with open(path, "wb") as f:
        np.savez_compressed(f, **arrays)
    return str(path)


def _take_on_model(path: str, X: Any) -> None:
    """A model file that loads must predict a finite, positive time for every row, NaN features included."""
    import numpy as np

    from fusionsearch.costmodel.learned import load

    times = load(path).predict(X)
    assert np.all(np.isfinite(times)) and np.all(times > 0), times[~(np.isfinite(times) & (times > 0))][:3]


def _model_cases(rng: random.Random, tmp: Path, tally: Tally) -> Iterator[None]:
    import numpy as np

    good, X = _small_model(tmp)
    arrays = _npz_arrays(good)
    meta = json.loads(arrays["meta"].tobytes())
    for i in range(FILE_CASES["model meta"]):
        changed, how = mutate(meta, rng)
        text = _dumps(changed).encode()
        path = _write_npz(tmp / f"meta{i}.npz", {**arrays, "meta": np.frombuffer(text, dtype=np.uint8)})
        _run(tally, "model meta", how, lambda path=path: _take_on_model(path, X))
        yield
    for i in range(FILE_CASES["model text"]):
        text, how = mutate_text(json.dumps(meta), rng)
        path = _write_npz(tmp / f"text{i}.npz", {**arrays, "meta": np.frombuffer(text, dtype=np.uint8)})
        _run(tally, "model text", how, lambda path=path: _take_on_model(path, X))
        yield
    numeric = sorted(k for k, a in arrays.items() if k != "meta")
    for i in range(FILE_CASES["model values"]):
        changed = dict(arrays)
        labels = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            key = rng.choice(numeric)
            a = changed[key].copy()
            if len(a):
                at = rng.randrange(len(a))
                pool = HOSTILE_FLOATS if a.dtype.kind == "f" else HOSTILE_INTS if a.dtype.kind == "i" else [True, False]
                value = rng.choice(pool) if rng.random() < 0.8 else a[rng.randrange(len(a))] * rng.choice([10, -1])
                a[at if rng.random() < 0.7 else slice(None)] = value
            changed[key] = a
            labels.append(key)
        path = _write_npz(tmp / f"values{i}.npz", changed)
        _run(tally, "model values", "+".join(labels), lambda path=path: _take_on_model(path, X))
        yield


def _take_on_entry(cache: Any, key: str, g: OpGraph, plan: P.Plan) -> None:
    """A cache entry loads as a plan for `g` with a usable record, or as a miss with at most one warning, and
    the next store repairs it."""
    import warnings

    from fusionsearch.dynamo.race import RegionChoice

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        entry = cache.load_entry(key, g)
        again = cache.load_entry(key, g)
    assert len(seen) <= 1 and (entry is None) == (again is None), [str(w.message) for w in seen]
    if entry is not None:
        got, record = entry
        assert got.graph is g
        best = record.get("best_us")
        assert best is None or (type(best) in (int, float) and (best != best or 0 < best < math.inf)), best
        choice = RegionChoice.from_dict(record.get("race"))
        assert choice is None or all(t is None or float(t) == t or t != t for t in (choice.ours_us, choice.inductor_us))
    cache.store(key, g, plan, 3.0)
    assert cache.load(key, g) == plan
    assert os.listdir(cache.directory) == [f"{key}.json"]


def _clear(path: Path) -> None:
    """Whatever is at `path` removed (a case that broke the rules may leave a directory or a FIFO there)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _cache_cases(rng: random.Random, bases: list[OpGraph], tmp: Path, tally: Tally) -> Iterator[None]:
    from fusionsearch.dynamo.plan_cache import PlanCache

    g = bases[0]
    plan = P.heuristic(g)
    cache = PlanCache(str(tmp / "plans"))
    key = cache.key(g, "cpu-interpreter", {})
    path = Path(cache.directory) / f"{key}.json"
    cache.store(key, g, plan, 12.5, {"race": {"label": "r", "chosen": "fusionsearch", "ours_us": 3.0,
                                               "inductor_us": 4.0, "fusion": "f", "mode": "default", "reason": ""}})
    record = json.loads(path.read_text())
    for _ in range(FILE_CASES["cache record"]):
        changed, how = mutate(record, rng)
        _clear(path)
        path.write_text(_dumps(changed))
        _run(tally, "cache record", how, lambda: _take_on_entry(cache, key, g, plan))
        yield
    for _ in range(FILE_CASES["cache text"]):
        data, how = mutate_text(json.dumps(record, indent=1), rng)
        _clear(path)
        path.write_bytes(data)
        _run(tally, "cache text", how, lambda: _take_on_entry(cache, key, g, plan))
        yield
    for i in range(FILE_CASES["cache file"]):
        _clear(path)
        kind = ["directory", "fifo", "device", "dangling link", "empty"][i % 5]
        if kind == "directory":
            path.mkdir()
            (path / "x").write_text("x")
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "device":
            path.symlink_to("/dev/zero")
        elif kind == "dangling link":
            path.symlink_to(tmp / "nowhere")
        else:
            path.write_bytes(b"")
        _run(tally, "cache file", kind, lambda: _take_on_entry(cache, key, g, plan))
        yield


def test_fuzzed_model_files_and_plan_cache_entries_load_or_are_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Model files (their JSON record as a value and as text, their arrays' values) and plan-cache entries (their
    record, their text, special files in their place): a model loads only to predict finite, positive times, or is
    refused with a one-line CostModelError; a cache entry loads as a usable record or is a miss, never blocks, and
    the next store repairs it."""
    rng = random.Random(SEED)
    tally = Tally(Counter(), Counter(), [])
    previous = signal.signal(signal.SIGALRM, _timeout)
    start = time.perf_counter()
    try:
        for _ in _model_cases(rng, tmp_path, tally):
            pass
        for _ in _cache_cases(rng, _bases(), tmp_path, tally):
            pass
    finally:
        signal.signal(signal.SIGALRM, previous)
    total = sum(tally.outcomes.values()) + len(tally.bad)
    with capsys.disabled():
        print(f"\nfuzz files: {total} cases in {time.perf_counter() - start:.1f} s (seed {SEED}): "
              f"{dict(sorted(tally.by_source.items()))}")
        for line in tally.bad[:20]:
            print("fuzz BROKE:", line)
    assert not tally.bad, f"{len(tally.bad)} cases broke the rules; first: {tally.bad[:5]}"
    assert total == sum(FILE_CASES.values())
    assert tally.by_source["model values: CostModelError"] >= 40 and tally.by_source["model values: accepted"] >= 20
    assert tally.by_source["cache record: accepted"] >= 50
