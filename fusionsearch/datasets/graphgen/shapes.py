"""The dims random graphs draw: M, K, N of real model families ("real"), or 1..SMALL_MAX for the interpreter."""

from __future__ import annotations

REAL_M = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
REAL_KN = (256, 512, 1024, 1536, 2048, 2560, 3072, 4096, 5120, 6144, 8192, 11008, 14336, 16384)
REAL_BMM_M = tuple(m for m in REAL_M if m <= 512)
REAL_BMM_N = (256, 512, 1024)
REAL_BMM_K = tuple(k for k in REAL_KN if k <= 4096)
REAL_TABLE_ROWS = (1024, 4096, 8192, 32000, 50304, 128256)  # gather tables: token buckets, vocabularies
SMALL_MAX = 80
