"""Decoder models written here for benchmarks and tests (gpt-fast's math, our own code, random weights)."""
