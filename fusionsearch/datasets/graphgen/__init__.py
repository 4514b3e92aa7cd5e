"""The parts of the random graph generator; `fusionsearch.datasets.random_graphs.random_graph` is its entry point.

values: what the generator knows of each value (bounds, rms, centring, precision) and the arithmetic on it.
shapes: the dims real model families use, and the small interpreter range.
builder: GraphBuilder, which adds inputs and ops to one graph with their values, and single pointwise ops.
chains: pointwise chains, drawn one move at a time where the value is in the move's domain.
matmuls: a matmul with its operands (activation prologues, weights, bias) and its epilogue.
families: the graph families (dense: single, chain, heads, gated, lora; batched chains) and the graph's outputs.
moe, rope, attention: blocks in the forms model code has (routed MoE; RMSNorm -> q/k/v -> RoPE; score chains).
"""
