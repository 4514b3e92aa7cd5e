"""The hardware profile plans are priced against: multiprocessors, bandwidth, peaks, shared memory, L2 and launch
overhead. At the ground of the package, since every kernel kind's estimate reads it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch


@dataclass(frozen=True)
class Hardware:
    """One GPU as the cost model sees it.

    `bandwidth_bytes_per_s`: DRAM copy bandwidth (bytes/s); `peak_flops`: dense matmul peak per operand
    dtype name (flop/s; 'float32' is the non-tensor-core IEEE fp32 rate, also used for elementwise work);
    `shared_memory_bytes`: usable shared memory per block (bytes); `l2_bytes`: L2 size (bytes);
    `launch_us`: fixed cost of one kernel launch (µs); `shared_memory_per_sm_bytes`: shared memory of one
    multiprocessor (bytes); `sm_clock_mhz`, `memory_clock_mhz`: the boost clocks (MHz). The last three entered
    with the learned model's hardware features (schema v8); 0 means unknown: a profile read without them takes a
    known GPU's figures by its name (KNOWN), else stays 0 and the features read it as missing (NaN).
    """

    name: str
    multiprocessors: int
    bandwidth_bytes_per_s: float
    peak_flops: dict[str, float] = field(hash=False)
    shared_memory_bytes: int
    l2_bytes: int
    launch_us: float
    shared_memory_per_sm_bytes: int = 0
    sm_clock_mhz: float = 0.0
    memory_clock_mhz: float = 0.0

    def peak(self, dtype: torch.dtype | str) -> float:
        """Peak flop/s for matmul operands of `dtype`; unknown dtypes get the float32 rate."""
        key = dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")
        return self.peak_flops.get(key, self.peak_flops["float32"])

    @property
    def elementwise_flops(self) -> float:
        """Flop/s of elementwise (non-tensor-core) fp32 work."""
        return self.peak_flops["float32"]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able record of every field."""
        d = asdict(self)
        d["peak_flops"] = dict(sorted(self.peak_flops.items()))
        return d

    @staticmethod
    def from_dict(record: Any) -> Hardware:
        """The profile `to_dict` wrote; a ValueError names what is missing or malformed."""
        names = ("name", "multiprocessors", "bandwidth_bytes_per_s", "peak_flops", "shared_memory_bytes",
                 "l2_bytes", "launch_us")
        if not isinstance(record, dict) or any(n not in record for n in names):
            raise ValueError(f"a hardware profile needs the fields {', '.join(names)}")
        peaks = record["peak_flops"]
        if not isinstance(peaks, dict) or "float32" not in peaks:
            raise ValueError("a hardware profile's peak_flops must map dtype names to flop/s, float32 included")
        known = KNOWN.get(str(record["name"]))  # figures a profile written before they existed lacks
        try:
            extra = {name: cast(record[name]) if name in record else getattr(known, name, cast(0))
                     for name, cast in (("shared_memory_per_sm_bytes", int), ("sm_clock_mhz", float),
                                        ("memory_clock_mhz", float))}
            return Hardware(str(record["name"]), int(record["multiprocessors"]), float(record["bandwidth_bytes_per_s"]),
                            {str(k): float(v) for k, v in peaks.items()}, int(record["shared_memory_bytes"]),
                            int(record["l2_bytes"]), float(record["launch_us"]), **extra)
        except (TypeError, ValueError):
            raise ValueError("a hardware profile holds a field that is not a number") from None

    def signature(self) -> str:
        """One readable line naming the figures, for logs and cache keys."""
        peaks = ",".join(f"{k}={v / 1e12:g}T" for k, v in sorted(self.peak_flops.items()))
        return (f"{self.name}|sm={self.multiprocessors}|bw={self.bandwidth_bytes_per_s / 1e12:g}TB/s|{peaks}"
                f"|smem={self.shared_memory_bytes}|l2={self.l2_bytes}|launch={self.launch_us:g}us")

    @staticmethod
    def detect() -> Hardware:
        """The profile of the current CUDA device; `H200` when no GPU is visible."""
        if not torch.cuda.is_available():
            return H200
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        # Only Hopper figures were measured (H200: shared/anchors; H100: the suite's ceilings); elsewhere a
        # deliberately low guess that the learned correction is expected to absorb.
        if any(tag in props.name for tag in ("H100", "H800")):
            base = H100
        elif "H200" in props.name:
            base = H200
        else:
            base = _CONSERVATIVE
        smem = getattr(props, "shared_memory_per_block_optin", 0) or base.shared_memory_bytes
        l2 = getattr(props, "L2_cache_size", 0) or base.l2_bytes
        smem_sm = getattr(props, "shared_memory_per_multiprocessor", 0) or base.shared_memory_per_sm_bytes
        clock = (getattr(props, "clock_rate", 0) or 0) / 1000 or base.sm_clock_mhz  # kHz where torch has it
        memory_clock = (getattr(props, "memory_clock_rate", 0) or 0) / 1000 or base.memory_clock_mhz
        return Hardware(props.name, props.multi_processor_count, base.bandwidth_bytes_per_s, dict(base.peak_flops),
                        int(smem), int(l2), base.launch_us, int(smem_sm), float(clock), float(memory_clock))


H200 = Hardware(
    name="NVIDIA H200",
    multiprocessors=132,
    bandwidth_bytes_per_s=4.27e12,  # device-to-device copy, shared/anchors
    peak_flops={"bfloat16": 706e12, "float16": 706e12,  # 8192^3 bf16 mm, shared/anchors
                "float32": 60e12,  # IEEE fp32 dot (no TF32)
                "int8": 1412e12, "float64": 34e12},
    shared_memory_bytes=232448,  # 227 KiB opt-in per block
    l2_bytes=50 * 2**20,
    launch_us=4.0,
    shared_memory_per_sm_bytes=233472,  # 228 KiB (Hopper)
    sm_clock_mhz=1980.0,  # boost, NVIDIA's datasheet
    memory_clock_mhz=3201.0,  # HBM3e
)

# H100 SXM (80GB HBM3): a device copy moves 2.999-3.003e12 B/s and an 8192^3 bf16 mm runs at 694-788 TFLOP/s
# (median 745) in the seven runs of measure.bench.measure_ceilings under benchmarks/results/h100-2026-12-05b-*
# (suite.py and the decode and grouped sweeps); the H200's bandwidth (4.27e12) priced the H100's memory-bound
# kernels 1.42x too fast.
H100 = replace(H200, name="NVIDIA H100 80GB HBM3", bandwidth_bytes_per_s=3.00e12,
                peak_flops={**H200.peak_flops, "bfloat16": 740e12, "float16": 740e12, "int8": 1480e12},
                memory_clock_mhz=2619.0)  # HBM3

_CONSERVATIVE = Hardware(
    name="unknown GPU",
    multiprocessors=80,
    bandwidth_bytes_per_s=1.0e12,
    peak_flops={"bfloat16": 150e12, "float16": 150e12, "float32": 15e12, "int8": 300e12, "float64": 5e12},
    shared_memory_bytes=101376,
    l2_bytes=6 * 2**20,
    launch_us=5.0,
)

# The GPUs whose figures are known by name: what a profile recorded before a field existed is read with these.
KNOWN = {hw.name: hw for hw in (H200, H100)}
