"""Rank -> group mapping against Megatron-LM's documented example and basic invariants."""
import pytest

from heterosim.errors import PlanError
from heterosim.workload.groups import RankLayout, build_groups, rank_coords


def test_megatron_docstring_example():
    # megatron/core/parallel_state.py initialize_model_parallel docstring: 16 GPUs, tp=2, pp=4 (dp=2)
    g = build_groups(16, tp=2, pp=4, dp=2)
    assert g["tp"] == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11), (12, 13), (14, 15)]
    assert g["pp"] == [(0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15)]
    assert g["dp"] == [(0, 2), (1, 3), (4, 6), (5, 7), (8, 10), (9, 11), (12, 14), (13, 15)]
    assert g["mp"] == [(0, 1, 4, 5, 8, 9, 12, 13), (2, 3, 6, 7, 10, 11, 14, 15)]


@pytest.mark.parametrize("tp,pp,dp,cp,ep,order", [
    (2, 4, 2, 1, 1, "tp-cp-ep-dp-pp"), (2, 2, 4, 2, 2, "tp-cp-ep-dp-pp"), (4, 2, 2, 1, 1, "tp-dp-pp"),
    (2, 2, 4, 1, 4, "tp-pp-ep-dp-cp"), (1, 3, 4, 2, 2, "tp-cp-ep-dp-pp"),
])
def test_groups_partition_world_and_match_coords(tp, pp, dp, cp, ep, order):
    world = tp * pp * dp * cp
    lay = RankLayout(world, tp, pp, dp, cp, ep, order)
    g = lay.groups()
    sizes = {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "dp_cp": dp * cp, "edp": dp * cp // ep}
    for dim, n in sizes.items():
        flat = sorted(r for grp in g[dim] for r in grp)
        assert flat == list(range(world)), dim
        assert all(len(grp) == n for grp in g[dim]), dim
    # members of a group differ only in that dimension's coordinate, listed in coordinate order
    for dim in ("tp", "pp", "dp", "cp", "ep") + (("edp",) if cp == 1 else ()):
        for grp in g[dim]:
            coords = [lay.coords(r) for r in grp]
            assert [c[dim] for c in coords] == list(range(len(grp)))
            keep = {"tp", "pp", "cp", "dp"} - {dim} - ({"dp"} if dim in ("ep", "edp") else set())
            for k in keep:
                assert len({c[k] for c in coords}) == 1, (dim, k)
    # ep and edp together span exactly the dense dp x cp group (experts carved out of data parallelism)
    for grp in g["dp_cp"]:
        s = set(grp)
        assert all(set(e) <= s or not set(e) & s for e in g["ep"])


def test_rank_coords_mixed_radix():
    # rank = tp + 2*(dp + 2*pp) for tp=2, dp=2, pp=4
    assert rank_coords(13, 16, tp=2, pp=4, dp=2) == {"tp": 1, "cp": 0, "ep": 0, "dp": 0, "pp": 3, "edp": 0}
    assert rank_coords(6, 16, tp=2, pp=4, dp=2)["dp"] == 1


def test_embedding_group_pairs_first_and_last_stage():
    g = build_groups(16, tp=2, pp=4, dp=2)
    assert (0, 12) in g["embd"] and (4,) in g["embd"]
    assert sorted(r for grp in g["embd"] for r in grp) == list(range(16))


def test_bad_sizes():
    with pytest.raises(PlanError, match="GPU count mismatch"):
        build_groups(15, tp=2, pp=4, dp=2)
    with pytest.raises(PlanError, match="ep must divide dp|carved out"):
        build_groups(16, tp=2, pp=2, dp=4, ep=3)
