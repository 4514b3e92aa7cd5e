"""The kinds' config values on their one shared base (plan/config.py KernelConfig): every config a search offers
round-trips through its label and its plan-file object; out-of-bounds values are told in the texts they had
before the base; a search's space hands each kind the chosen typed value, so that no label is read back on the
search's path."""

from __future__ import annotations

import random

import pytest

import fusionsearch as fs
from fusionsearch.costmodel.analytic import fits
from fusionsearch.errors import PlanError, SpecError
from fusionsearch.kinds.decode_matmul.kernel import DecodeConfig
from fusionsearch.kinds.grouped_matmul.kernel import GroupedConfig
from fusionsearch.plan import Plan, TileConfig
from fusionsearch.plan.config import KernelConfig
from fusionsearch.search.space import Space, enumerate_space, random_plans, seed_plans

# a template-only workload, one of one row (the decode kind's), and a mixture of experts (the grouped kind's)
WORKLOADS = (("mm_bias_gelu", {}), ("w4_dequant_mm", {"M": 1}), ("moe_ffn", {}))


def _space(name: str, shape: dict[str, int]) -> Space:
    return enumerate_space(fs.workload(name, **shape), lambda g, mm, cfg: fits(g, mm, cfg), 48, library=True)


@pytest.fixture(scope="module")
def spaces() -> list[Space]:
    return [_space(name, shape) for name, shape in WORKLOADS]


def test_every_offered_config_round_trips_through_its_label_and_its_plan_object(spaces: list[Space]) -> None:
    seen: set[type] = set()
    for space in spaces:
        for choices in space.choices:
            for c in choices:
                if c.kind == "library":
                    assert c.value == c.label  # a label standing for itself: no config
                    continue
                cfg = c.value
                assert isinstance(cfg, KernelConfig) and cfg.short() == c.label
                assert type(cfg).from_short(c.label) == cfg
                d = cfg.to_dict()
                assert type(cfg).from_dict(d, "here") == cfg
                seen.add(type(cfg))
    assert seen == {TileConfig, DecodeConfig, GroupedConfig}


def test_labels_and_plan_objects_keep_their_text() -> None:
    assert TileConfig(16, 64, 256, 8, 2, 4, 3).short() == "16x64x256 g8 sk2 w4 s3"
    assert (DecodeConfig(256, 64, 8, 4, 3, "dot", True, True, True).short()
            == "decode dot n256 k64 sk8 w4 s3 pairs words rows")
    assert DecodeConfig(product="gemv").short() == "decode gemv n64 k256 sk8 w4 s3"
    assert GroupedConfig().short() == "grouped m16 n64 k128 sk4 w4 s3"
    assert DecodeConfig().to_dict() == {"block_n": 64, "block_k": 256, "split_k": 8, "num_warps": 4, "num_stages": 3,
                                        "product": "dot", "pairs": False, "words": False, "rows": False}
    assert list(TileConfig().to_dict()) == ["block_m", "block_n", "block_k", "group_m", "split_k", "num_warps",
                                            "num_stages"]
    with pytest.raises(SpecError, match=r"^here: 'config' must be an object with keys \['block_k', 'block_m', "):
        GroupedConfig.from_dict({"block_m": 16, "WHAT": "x"}, "here")  # a class attribute is not a field
    for wrong in ("decode dot n64 k256", "64x64x32 g8 sk1 w4 s3 pairs", "grouped m16 n64 k128 sk4 w4 s3 rows"):
        for t in (TileConfig, DecodeConfig, GroupedConfig):
            with pytest.raises(PlanError, match=rf"^{wrong!r} is not a {t.WHAT} label \(like '"):
                t.from_short(wrong)


# Each text as the configs raised it before the shared base (commit 5a2e5ac).
OUT_OF_BOUNDS = [
    (TileConfig, {"block_m": 512}, "tile config block_m must be at most 256, got 512"),
    (TileConfig, {"block_m": 8}, "tile config block_m, block_n and block_k must be at least 16 (tl.dot's minimum)"),
    (TileConfig, {"split_k": 0}, "tile config split_k must be a positive integer, got 0"),
    (TileConfig, {"block_m": 12}, "tile config block_m must be a power of two, got 12"),
    (TileConfig, {"group_m": 65}, "tile config group_m must be at most 64, got 65"),
    (DecodeConfig, {"block_n": 2048}, "decode config block_n must be at most 1024, got 2048"),
    (DecodeConfig, {"block_k": 8},
     "decode config block_n must be at least 16 and block_k at least 16 for product 'dot'"),
    (DecodeConfig, {"product": "gemv", "block_n": 1},
     "decode config block_n must be at least 2 and block_k at least 8 for product 'gemv'"),
    (DecodeConfig, {"words": True, "pairs": True, "block_n": 32},
     "decode config block_n must be at least 64 and block_k at least 32 for product 'dot' in pairs words"),
    (DecodeConfig, {"num_warps": 3}, "decode config num_warps must be a power of two, got 3"),
    (DecodeConfig, {"num_stages": True}, "decode config num_stages must be a positive integer, got True"),
    (DecodeConfig, {"split_k": 65}, "decode config split_k must be at most 64, got 65"),
    (DecodeConfig, {"product": "x"}, "decode config product must be one of dot, dot_t, fma, fma_acc, gemv, got 'x'"),
    (GroupedConfig, {"block_m": 8}, "grouped config block_m must be an integer in [16, 256], got 8"),
    (GroupedConfig, {"block_m": 12}, "grouped config block_m must be an integer in [16, 256], got 12"),
    (GroupedConfig, {"block_n": 1024}, "grouped config block_n must be an integer in [16, 512], got 1024"),
    (GroupedConfig, {"block_m": 48}, "grouped config block_m must be a power of two, got 48"),
    (GroupedConfig, {"num_stages": 2.0}, "grouped config num_stages must be an integer in [1, 8], got 2.0"),
]


@pytest.mark.parametrize(("config_type", "values", "text"), OUT_OF_BOUNDS,
                         ids=[f"{t.__name__}-{'-'.join(map(str, v.values()))}" for t, v, _ in OUT_OF_BOUNDS])
def test_an_out_of_bounds_value_is_told_as_before(config_type: type[KernelConfig], values: dict[str, object],
                                                   text: str) -> None:
    with pytest.raises(PlanError) as e:
        config_type(**values)
    assert str(e.value) == text
    with pytest.raises(PlanError) as e:  # and read from a plan file, after the entry's name and matmul
        config_type.from_dict(values, "kernel 0")
    assert str(e.value) == text


def test_shared_memory_is_the_pipelines_blocks() -> None:
    """num_stages buffers of one A block (BLOCK_M rows; the decode kind's most rows: 16, gemv's 4) and one B."""
    assert TileConfig(16, 64, 256, 8, 2, 4, 3).shared_memory_bytes(2) == 3 * (16 * 256 + 256 * 64) * 2
    assert GroupedConfig(32, 128, 64, 1, 4, 2).shared_memory_bytes(2) == 2 * (32 * 64 + 64 * 128) * 2
    assert DecodeConfig(64, 256, num_stages=3).shared_memory_bytes(2) == 3 * (16 * 256 + 256 * 64) * 2
    assert DecodeConfig(64, 256, num_stages=3, product="gemv").shared_memory_bytes(1) == 3 * (4 * 256 + 256 * 64)


def test_the_search_hands_each_kind_its_typed_config_and_reads_no_label_back(
        spaces: list[Space], monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(cls: type, label: str) -> None:
        raise AssertionError(f"the search read label {label!r} back")

    monkeypatch.setattr(KernelConfig, "from_short", classmethod(refused))
    for space in spaces:
        base = space.params_for({})
        plans = [space.plan(p) for p in seed_plans(space)] + random_plans(space, 10, random.Random(0))
        for i, choices in enumerate(space.choices):
            for c in choices:
                try:
                    plans.append(space.plan({**base, f"mm{i}.config": c.label}))
                except PlanError:
                    continue
                k = next(k for k in plans[-1].kernels if getattr(k, "matmul", None) == space.matmuls[i])
                assert k.kind == c.kind and getattr(k, "config", c.value) is c.value
        kinds = {k.kind for p in plans for k in p.kernels}
        assert kinds & {"template", "decode", "grouped"}
        for p in plans:  # the plan JSON reads back equal (the label's text is not in it)
            assert Plan.from_json(p.to_json(), space.graph) == p
