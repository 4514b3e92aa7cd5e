"""Extra ncu columns per profiled kernel (raw csv): L2 hit rate, tensor pipe, SM throughput, by metric-name match."""
import csv
import sys

rows = list(csv.reader(open(sys.argv[1])))
head, units, data = rows[0], rows[1], rows[2:]
want = ["Kernel Name", "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
        "lts__t_sector_hit_rate.pct", "lts__t_bytes.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__warps_active.avg.pct_of_peak_sustained_active", "launch__grid_size", "launch__registers_per_thread"]
cols = [(w, head.index(w)) for w in want if w in head]
print(" | ".join(f"{w} [{units[i]}]" for w, i in cols))
for r in data:
    print(" | ".join(r[i] for _, i in cols))
