"""The random graph generator's output is pinned: the cost model's shipped measurements (and every dataset
collected since) name their graphs by `random_graph(seed)`'s signature hash, so a refactor must leave each seed's
graph bit-for-bit as it was.

The values below were printed by the generator as it stood before issue 26 split random_graphs.py (commit
a9b22e2): for each option set, the signature hashes of seeds 0-5 and a digest of their JSON specs (which adds the
node names and the order of inputs and nodes). The 'real' hashes are also the first graph_ids of
datasets/data/h200-measurements.jsonl.gz, whose 300 graphs are random_graph(0..299). Change them only when the
generator is changed on purpose, and say so: graphs collected before no longer come back from their seeds."""

from __future__ import annotations

import hashlib
import json

import pytest

from fusionsearch.datasets.random_graphs import random_graph

OPTIONS = {
    "real": {},
    "small": {"shape_scale": "small"},
    "small-fp32-fp16": {"shape_scale": "small", "dtypes": ("fp32", "fp16")},
    "real-1mm-fp16": {"max_matmuls": 1, "dtypes": ("fp16",)},
    "real-bf16-fp32": {"dtypes": ("bf16", "fp32")},
}
GOLDEN = {  # option set: (signature hashes of seeds 0-5, digest of their specs)
    "real": (["9c6287cb137d21f0", "c15c6eeae426c1ba", "1f79ecfd42be575b", "5ad2dae656cde0a8", "90ec33af83fe85bb",
              "cedd57cef0198cdc"], "e0795124ad9179e1"),
    "small": (["ead8bb689c6a4f49", "faa11e433fe3098f", "cf7d85ef96c9e509", "b60fd7d292ff63d8", "04f4ac66c6b21dad",
               "931ab7a522db897c"], "f3b75f43bb880515"),
    "small-fp32-fp16": (["ead8bb689c6a4f49", "ae5307247ca5f6a0", "6fc6f6031c2835e9", "cf9be1361bcfc952",
                         "36fa08363d77f9e7", "0e925615d0b4d385"], "eb1ff544c4ae769e"),
    "real-1mm-fp16": (["335ed97c5e226c59", "41de72ad0ebfad66", "003bd20dc9fa8cc7", "057ceee79ae015dd",
                       "2972e43ed8ee2a6f", "a3a8ce9a0df05924"], "ecca2ed7d210b717"),
    "real-bf16-fp32": (["c5099a734358fe10", "c15c6eeae426c1ba", "1f79ecfd42be575b", "5ad2dae656cde0a8",
                        "90ec33af83fe85bb", "7803fa5e25ed935e"], "9396f02a9feeb445"),
}


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_seeds_give_the_pinned_graphs(name: str) -> None:
    graphs = [random_graph(seed, **OPTIONS[name]) for seed in range(6)]  # type: ignore[arg-type]
    hashes, specs = GOLDEN[name]
    assert [g.signature_hash() for g in graphs] == hashes
    digest = hashlib.sha256(json.dumps([g.to_dict() for g in graphs], sort_keys=True).encode()).hexdigest()[:16]
    assert digest == specs


FAMILY_GOLDEN = {  # (family, option set): (signature hashes of seeds 0-2, digest of their specs), printed by the
    # generator at commit 0fae2c6, before issue 54 added the routed MoE, norm/RoPE and attention families
    ("experts", "real"): (["3fb8a54418250bb7", "8ef6098ec878a0a7", "dcd52ff7d0ae6132"], "3ae95e5e8b13ff27"),
    ("experts", "small"): (["e7015188a32cc8b4", "b8bfc1b7af7dbb95", "52abf1a5bac64961"], "3f29d5e34b7dc04f"),
    ("decode", "real"): (["5dd3e97c96013e5f", "511496ad032c67d9", "25adebdd916648f3"], "eed86ad48741107b"),
    ("decode", "small"): (["5ff80854c262c816", "30a9daca0c5dba29", "3792379f03734a43"], "da7ad6bd76ca0149"),
}


@pytest.mark.parametrize("key", sorted(FAMILY_GOLDEN))
def test_the_older_families_seeds_give_the_pinned_graphs(key: tuple[str, str]) -> None:
    family, scale = key
    graphs = [random_graph(seed, family=family, **OPTIONS[scale]) for seed in range(3)]  # type: ignore[arg-type]
    hashes, specs = FAMILY_GOLDEN[key]
    assert [g.signature_hash() for g in graphs] == hashes
    digest = hashlib.sha256(json.dumps([g.to_dict() for g in graphs], sort_keys=True).encode()).hexdigest()[:16]
    assert digest == specs
