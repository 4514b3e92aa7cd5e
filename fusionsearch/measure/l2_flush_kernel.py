"""The clean L2 flush's Triton kernel (measure.l2_flush), in a module of its own so that importing the timer
does not import triton.language (see l2_flush.read_words)."""

import triton
import triton.language as tl


@triton.jit
def read_words_kernel(words_ptr, out_ptr, WORDS: tl.constexpr, BLOCK: tl.constexpr):
    """Read every word (grid-stride), store one xor per program: the only bytes written are the programs'."""
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], tl.int32)
    for i in tl.range(pid, WORDS // BLOCK, tl.num_programs(0)):
        acc ^= tl.load(words_ptr + i * BLOCK + tl.arange(0, BLOCK))
    tl.store(out_ptr + pid, tl.xor_sum(acc, 0))
