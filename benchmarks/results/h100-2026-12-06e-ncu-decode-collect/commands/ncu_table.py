"""The ncu report's figures per profiled kernel, as a markdown table:
    ncu --import probe.ncu-rep --page raw --csv > raw.csv
    python ncu_table.py raw.csv ncu.log
The probe's labels are the JSON list ncu_probe.py prints; the torch copies run as cudaMemcpyAsync (no kernel,
so not in the report) and are left out of the labels here."""
import csv
import json
import sys

raw, log = sys.argv[1], sys.argv[2]
labels = [x for x in json.loads([x for x in open(log) if x.startswith('["')][-1]) if not x.startswith("copy")]
rows = list(csv.reader(open(raw)))
head, data = rows[0], rows[2:]
col = {h: i for i, h in enumerate(head)}
COLS = [("µs", "gpu__time_duration.sum", 1.0), ("DRAM read MB", "dram__bytes_read.sum", 1.0),
        ("DRAM write MB", "dram__bytes_write.sum", 1.0), ("read TB/s", "dram__bytes_read.sum.per_second", 1e-12),
        ("DRAM read % peak", "dram__bytes_read.sum.pct_of_peak_sustained_elapsed", 1.0),
        ("regs", "launch__registers_per_thread", 1.0), ("CTAs", "launch__grid_size", 1.0),
        ("CTAs/SM (regs, smem)", None, None),
        ("warps active %", "sm__warps_active.avg.pct_of_peak_sustained_active", 1.0),
        ("issue active %", "smsp__issue_active.avg.pct_of_peak_sustained_active", 1.0),
        ("eligible warps/cycle", "smsp__warps_eligible.avg.per_cycle_active", 1.0),
        ("shared wavefronts % peak",
         "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed", 1.0)]


def num(r, name):
    return float(r[col[name]].replace(",", ""))


def stalls(r):
    out = []
    for h in head:
        if h.startswith("smsp__pcsamp_warps_issue_stalled_") and not h.endswith("_not_issued"):
            try:
                out.append((num(r, h), h.split("stalled_")[1]))
            except ValueError:
                pass
    total = sum(v for v, _ in out) or 1.0
    return ", ".join(f"{n} {100 * v / total:.0f}%" for v, n in sorted(out, reverse=True)[:3])


print("| kernel | " + " | ".join(c[0] for c in COLS) + " | top stall reasons (share of warp-cycles) |")
print("|---" * (len(COLS) + 2) + "|")
for label, r in zip(labels, data, strict=True):
    cells = []
    for _, name, _scale in COLS:
        if name is None:
            regs, smem = num(r, "launch__occupancy_limit_registers"), num(r, "launch__occupancy_limit_shared_mem")
            cells.append(f"{regs:.0f}, {smem:.0f}")
        elif name in ("dram__bytes_read.sum", "dram__bytes_write.sum"):
            unit = rows[1][col[name]]
            cells.append(f"{num(r, name) * {'byte': 1e-6, 'Kbyte': 1e-3, 'Mbyte': 1.0, 'Gbyte': 1e3}[unit]:.1f}")
        elif name.endswith("per_second"):
            unit = rows[1][col[name]]
            f = {"byte/s": 1e-12, "Kbyte/s": 1e-9, "Mbyte/s": 1e-6, "Gbyte/s": 1e-3, "Tbyte/s": 1.0}[unit]
            cells.append(f"{num(r, name) * f:.2f}")
        elif name == "gpu__time_duration.sum":
            unit = rows[1][col[name]]
            cells.append(f"{num(r, name) * {'ns': 1e-3, 'us': 1.0, 'ms': 1e3}[unit]:.1f}")
        else:
            cells.append(f"{num(r, name):.1f}" if num(r, name) % 1 else f"{num(r, name):.0f}")
    print(f"| {label} | " + " | ".join(cells) + f" | {stalls(r)} |")
