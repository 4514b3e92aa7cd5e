"""The int4 GEMV graph with its shift amount a constant of the graph (both K parities the same nibble, (w >> 4) & 15):
the same loads and instruction mix as w4_dequant_mm, whose shift amounts are an input tensor. Writes the spec."""
import json
import sys

import torch

sys.path.insert(0, ".")
from fusionsearch.graph.opgraph import OpGraph  # noqa: E402

K, N, G = (int(v) for v in sys.argv[3:6]) if len(sys.argv) > 3 else (4096, 11008, 128)
M = int(sys.argv[1])
g = OpGraph()
x, w = g.input("x", (M, K), torch.bfloat16), g.input("w", (K // 2, N), torch.uint8)
s, z = g.input("scales", (K // G, N), torch.bfloat16), g.input("zeros", (K // G, N), torch.bfloat16)
pairs = g.add("expand", [g.add("unsqueeze", [w], name="w_pairs", dim=1)], name="w_both", shape=[K // 2, 2, N])
nib = g.add("bitwise_and", [g.add("bitwise_right_shift", [pairs], name="w_shifted", scalar=4)], name="w_nibbles",
            scalar=15)
q = g.add("cast", [g.add("view", [nib], name="w_int4", shape=[K, N])], name="w_float", dtype="bfloat16")


def per_group(p):
    rows = g.add("expand", [g.add("unsqueeze", [p], name=f"{p}_rows", dim=1)], name=f"{p}_groups", shape=[K // G, G, N])
    return g.add("view", [rows], name=f"{p}_k", shape=[K, N])


b = g.add("add", [g.add("mul", [g.add("sub", [q], name="w_centered", scalar=8), per_group(s)], name="w_scaled"),
                  per_group(z)], name="w_dequant")
g.set_outputs([g.add("mm", [x, b], name="y")])
json.dump(g.validate().to_dict(), open(sys.argv[2], "w"))
