"""OpGraph.signature_hash is computed once per graph (every plan's JSON names it) and computed again after any
change: through the builders, a node removed through `nx` (as capture does), or the outputs list changed."""

from __future__ import annotations

import hashlib

import pytest
import torch

from fusionsearch.graph.opgraph import OpGraph


def _graph() -> OpGraph:
    g = OpGraph()
    x = g.input("x", [4, 8], torch.float32)
    w = g.input("w", [8, 3], torch.float32)
    y = g.add("mm", [x, w], name="y")
    g.set_outputs([g.add("relu", [y], name="r")])
    return g


def _fresh(g: OpGraph) -> str:
    """The hash as computed from scratch: the reference the cached one must equal."""
    return hashlib.sha256(g.signature().encode()).hexdigest()[:16]


def test_the_hash_is_computed_once_and_again_after_every_change(monkeypatch: pytest.MonkeyPatch) -> None:
    g = _graph()
    calls: list[int] = []
    real = OpGraph.signature

    def counted(self: OpGraph) -> str:
        calls.append(1)
        return real(self)

    monkeypatch.setattr(OpGraph, "signature", counted)
    first = g.signature_hash()
    assert [g.signature_hash() for _ in range(5)] == [first] * 5 and len(calls) == 1
    assert first == _graph().signature_hash()  # equal graphs, equal hashes

    g.add("exp", ["r"], name="e")  # a builder clears it
    added = g.signature_hash()
    assert added == _fresh(g) != first and len(calls) == 4  # after the other graph's, and one for _fresh
    g.set_outputs(["e"])
    changed = g.signature_hash()
    assert changed == _fresh(g) != added
    g.outputs.append("r")  # the outputs list changed in place
    assert g.signature_hash() == _fresh(g) != changed
    g.nx.remove_node("e")  # removed around the builders, as capture does with a node aten disagrees with
    g.outputs.remove("e")
    assert g.signature_hash() == _fresh(g) == first
