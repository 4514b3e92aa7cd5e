"""CPU: where the H100 learned model ranks two seeded configs among their search's plans, before any measurement
corrects it (the ranked sampler's first order): the decode `rows` configs for w4_dequant_mm M16 K4096 N11008
G128, and the template `16x32x128 sk1 w2 s6` for mm_bias_gelu M16 K4096 N4096 (bf16); priced for the H100 (what
a search on that GPU uses) and for the H200 profile (a machine without a GPU). The plans priced standalone
(no fusion) are left out. Run from the repository root:
    python benchmarks/results/cpu-2026-12-06k-rows-rank/rows_rank.py"""
import torch

import fusionsearch as fs
from fusionsearch.hardware import H100, H200
from fusionsearch.search.objective import Objective
from fusionsearch.search.ranked import PlanRanking
from fusionsearch.search.session import setup
from fusionsearch.search.study import SearchOptions

CASES = [("w4_dequant_mm", {"M": 16, "K": 4096, "N": 11008, "G": 128}, lambda label: label.endswith(" rows")),
         ("mm_bias_gelu", {"M": 16, "K": 4096, "N": 4096}, lambda label: label == "16x32x128 g8 sk1 w2 s6")]
options = SearchOptions(backend="model", cost_model="fusionsearch/datasets/data/costmodel-h100.npz")
for name, shape, wanted in CASES:
    g = fs.workload(name, dtype=torch.bfloat16, **shape)
    for hw in (H100, H200):
        found = setup(g, options, hw)
        objective = Objective(g, found.space, options, "model", hw)
        assert objective.model is not None
        ranking = PlanRanking(found.space, hw, lambda o=objective: o.model,
                              lambda p, o=objective: not o.bytes_rule_refuses(p))
        order = ranking.order()
        print(f"{name} {shape}, priced for {hw.name}:")
        for i, params in enumerate(order):
            if i < 2 or wanted(params["mm0.config"]) and params["g0.fusion"] != "standalone":
                print(f"  rank {i + 1:3d} of {len(order)}: {params['g0.fusion']}, {params['mm0.config']}")
