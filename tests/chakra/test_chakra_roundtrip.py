"""Export -> import round trips, and a hand-written trace replayed on a two-GPU cluster.

Expected values: the same scenario simulated from its own IR (iteration time in ns); recorded durations
are whole microseconds, so a replay may differ by at most half a microsecond per compute op on the
critical path, bounded here by the compute ops of one rank per pipeline stage (a path visits each op at
most once); re-timed by the compute model (``timing: compute_model``) it must be the same to the ns.
"""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("google.protobuf")

from heterosim import api  # noqa: E402
from heterosim.chakra import export_chakra  # noqa: E402
from heterosim.config.loader import scenario_from_dict  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"


def replay_scenario(sc, folder: Path, timing: str):
    data = {k: v for k, v in sc.model_dump().items() if k not in ("model", "parallelism")}
    data["workload"] = {"chakra": str(folder), "timing": timing}
    return scenario_from_dict(data)


def rounding_bound_ns(ir) -> int:
    """Half a microsecond per compute op of one rank of every pipeline stage."""
    pp = ir.groups.get("pp") or [(0,)]
    return sum(500 for r in pp[0] for op in ir.ops_of(r) if op.kind == "compute")


def round_trip(tmp_path, overrides, backend=None, timings=("recorded", "compute_model"), scenario=QUICKSTART):
    sc = api.load(scenario, overrides)
    prep = api.prepare(sc)
    want = api.simulate(prep, backend=backend, record_messages=False).summary
    res = export_chakra(sc, tmp_path / "et")
    assert res.ranks == prep.system.num_gpus == len(list((tmp_path / "et").glob(f"{sc.name}.*.et")))
    got = {}
    for timing in timings:
        p2 = api.prepare(replay_scenario(sc, tmp_path / "et", timing))
        assert p2.ir.rank_program == prep.ir.rank_program  # TP ranks share a program again: one lane each
        got[timing] = api.simulate(p2, backend=backend, record_messages=False).summary
    return prep, want, got


@pytest.mark.slow
def test_quickstart_round_trip_flow(tmp_path):
    prep, want, got = round_trip(tmp_path, [])
    assert got["compute_model"]["iteration_time_ns"] == want["iteration_time_ns"]
    b, wb = got["compute_model"]["breakdown"], want["breakdown"]
    assert b["exposed_comm"] == pytest.approx(wb["exposed_comm"], abs=1e-9)
    assert (b["compute"], b["bubble"], b["idle"]) == pytest.approx((wb["compute"], wb["bubble"], wb["idle"]), abs=1e-9)
    diff = abs(got["recorded"]["iteration_time_ns"] - want["iteration_time_ns"])
    assert diff <= rounding_bound_ns(prep.ir)
    assert got["recorded"]["model_flops_per_iteration"] == want["model_flops_per_iteration"]


def test_interleaved_pipeline_round_trip_flow(tmp_path):
    """PP4 with two virtual stages: sends wrap from the last stage to the first."""
    prep, want, got = round_trip(tmp_path, ["parallelism.pp=4", "parallelism.schedule=interleaved",
                                            "parallelism.virtual_stages=2", "training.global_batch_size=16"])
    assert len(prep.ir.groups["pp"][0]) == 4
    assert got["compute_model"]["iteration_time_ns"] == want["iteration_time_ns"]
    assert abs(got["recorded"]["iteration_time_ns"] - want["iteration_time_ns"]) <= rounding_bound_ns(prep.ir)


@pytest.mark.ns3
@pytest.mark.slow
def test_small_round_trip_ns3(tmp_path):
    pytest.importorskip("cppyy", reason="ns-3 backend needs the ns3 wheel (pip install 'heterosim[ns3]')")
    small = ["training.global_batch_size=8", "training.seq_length=512", "model.num_layers=2", "model.hidden_size=512",
             "model.num_attention_heads=8", "model.ffn_hidden_size=2048", "model.vocab_size=8192"]
    prep, want, got = round_trip(tmp_path, small, backend="ns3", timings=("compute_model",))
    assert got["compute_model"]["iteration_time_ns"] == want["iteration_time_ns"]


def test_hand_written_trace_replays_in_dependency_order(tmp_path):
    """Two GPUs on two nodes (200G NICs): rank 0 computes 120 us, sends 1 MiB to rank 1, which computes 50 us
    after receiving; then both all-gather 8 MiB each (ASTRA-sim's comm_size: each rank's input, so a 16 MiB
    output and 8 MiB crosses the network each way). Nothing overlaps, so the iteration takes at least
    120 + 50 us + 9 MiB at 25 GB/s. The receive is posted ahead (eager sends): a receive op with no
    dependencies, then a zero-time op that waits for it and for the receive node's dependencies."""
    from test_chakra_schema import write_golden

    write_golden(tmp_path / "et")
    sc = scenario_from_dict({
        "name": "golden", "workload": {"chakra": str(tmp_path / "et")},
        "training": {"global_batch_size": 1},
        "cluster": {"groups": [{"name": "gh", "node_type": "gh200", "num_nodes": 2,
                                "overrides": {"gpus_per_node": 1}}]},
    })
    prep = api.prepare(sc)
    ops1 = prep.ir.ops_of(1)
    assert [(o.kind, o.collective, o.duration_ns, o.size_bytes, o.deps) for o in ops1] == [
        ("comm", "recv", -1, 1 << 20, ()), ("compute", "", 0, 0, (0,)), ("compute", "", 50_000, 0, (1,)),
        ("comm", "allgather", -1, 16 << 20, (2,))]
    assert prep.ir.ops_of(0)[0].duration_ns == 120_000 and prep.ir.ops_of(0)[0].flops == 2 * 4096 ** 3
    t = api.simulate(prep, record_messages=False).summary["iteration_time_ns"]
    floor = 120_000 + 50_000 + (9 << 20) / 25e9 * 1e9
    assert floor <= t <= 1.25 * floor  # headers, NIC and switch latency on top of line rate


def test_compute_model_retimes_a_foreign_flop_count(tmp_path):
    """A node with num_ops but no kernels is timed by the compute model's roofline (class layer) when asked."""
    from test_chakra_schema import write_golden

    write_golden(tmp_path / "et")
    base = {"name": "golden", "training": {"global_batch_size": 1},
            "cluster": {"groups": [{"name": "gh", "node_type": "gh200", "num_nodes": 2,
                                    "overrides": {"gpus_per_node": 1}}]}}
    rec = api.prepare(scenario_from_dict({**base, "workload": {"chakra": str(tmp_path / "et")}}))
    re_ = api.prepare(scenario_from_dict({**base, "workload": {"chakra": str(tmp_path / "et"),
                                                               "timing": "compute_model"}}))
    op = re_.ir.ops_of(0)[0]
    assert op.duration_ns == -1 and op.op_class == "layer"
    assert rec.ir.ops_of(1)[2].duration_ns == re_.ir.ops_of(1)[2].duration_ns == 50_000  # no FLOPs: recorded


def test_stream_order_as_data_deps_imports_the_same_programs(tmp_path):
    """``stream_deps="data"`` (for ASTRA-sim's feeder) moves the stream order into data_deps: no ctrl_deps
    are written, and the imported programs are the same."""
    from heterosim.chakra import schema as S
    from heterosim.chakra.importer import read_et_file

    sc = api.load(QUICKSTART, ["training.global_batch_size=8", "model.num_layers=2"])
    export_chakra(sc, tmp_path / "ctrl")
    export_chakra(sc, tmp_path / "data", stream_deps="data")
    nodes = read_et_file(tmp_path / "data" / "quickstart.0.et", 0).nodes
    assert nodes and not any(n.ctrl_deps for n in nodes)
    assert any(n.ctrl_deps for n in read_et_file(tmp_path / "ctrl" / "quickstart.0.et", 0).nodes)
    a = api.prepare(replay_scenario(sc, tmp_path / "ctrl", "recorded")).ir
    b = api.prepare(replay_scenario(sc, tmp_path / "data", "recorded")).ir
    assert [[o.deps for o in p.ops] for p in a.programs] == [[o.deps for o in p.ops] for p in b.programs]
    assert S.SCHEMA_VERSION == read_et_file(tmp_path / "data" / "quickstart.0.et", 0).meta["version"]


def test_exported_durations_carry_a_stragglers_slowdown(tmp_path):
    """A GPU 1.5x slower slows its whole TP group (lock-step): the group's compute nodes record 1.5x the time
    of the same nodes elsewhere, and a replay of the recorded times matches the original within rounding."""
    from heterosim.chakra.importer import read_et_file

    sc = api.load(QUICKSTART, ["training.global_batch_size=8", "model.num_layers=2",
                               "cluster.stragglers=[{gpu: h100-0/gpu1, slowdown: 1.5}]"])
    prep = api.prepare(sc)
    assert prep.system.gpus[1].slowdown == 1.5 and prep.ir.group_of(0, "tp") == (0, 1)
    export_chakra(sc, tmp_path / "et")
    slow = read_et_file(tmp_path / "et" / "quickstart.0.et", 0).nodes   # rank 0 shares rank 1's TP group
    fast = read_et_file(tmp_path / "et" / "quickstart.2.et", 2).nodes
    pairs = [(a.duration_micros, b.duration_micros) for a, b in zip(slow, fast) if a.type == 4 and b.duration_micros > 100]
    assert pairs and all(abs(a - 1.5 * b) <= 0.5 + 1.5 * 0.5 for a, b in pairs)  # each side rounded to 1 us
    want = api.simulate(prep, record_messages=False).summary["iteration_time_ns"]
    got = api.simulate(api.prepare(replay_scenario(sc, tmp_path / "et", "recorded")),
                       record_messages=False).summary["iteration_time_ns"]
    assert abs(got - want) <= rounding_bound_ns(prep.ir)


def test_retimed_on_another_device_equals_compiling_for_it(tmp_path):
    """Traces exported on H100 nodes, replayed on DGX A100 nodes with ``timing: compute_model``, give exactly
    what compiling the same scenario for the A100 nodes gives (the kernels, not the times, travel); with
    recorded times the replay keeps the H100 compute and so is faster than the A100 original."""
    small = ["training.global_batch_size=8", "model.num_layers=2"]
    h100 = api.load(QUICKSTART, small)
    a100 = api.load(QUICKSTART, small + ["cluster.groups[0].node_type=dgx-a100"])
    want = api.simulate(api.prepare(a100), record_messages=False).summary["iteration_time_ns"]
    export_chakra(h100, tmp_path / "et")
    got = {t: api.simulate(api.prepare(replay_scenario(a100, tmp_path / "et", t)),
                           record_messages=False).summary["iteration_time_ns"] for t in ("compute_model", "recorded")}
    assert got["compute_model"] == want
    assert got["recorded"] < want


@pytest.mark.slow
def test_stage_tp_round_trip_flow(tmp_path):
    """Stages of TP 8/4/4 (scenarios/stage-tp.yaml): a pipeline send between unequal TP groups is written as
    the transfers the coordinator re-shards it into (one node per transfer, real peers) and merged back on
    import, so the TP groups run as lanes again."""
    from heterosim.chakra.importer import read_et_file

    prep, want, got = round_trip(tmp_path, [], scenario=ROOT / "scenarios" / "stage-tp.yaml")
    assert got["compute_model"]["iteration_time_ns"] == want["iteration_time_ns"]
    assert abs(got["recorded"]["iteration_time_ns"] - want["iteration_time_ns"]) <= rounding_bound_ns(prep.ir)
    # rank 8 (first GPU of the TP4 stage) receives its quarter from two of the eight TP8 senders
    recv = [n for n in read_et_file(tmp_path / "et" / "stage-tp.8.et", 8).nodes if n.type == 6 and "ir_op" in n.attrs]
    first = [n for n in recv if n.attrs["ir_op"] == recv[0].attrs["ir_op"]]
    assert sorted(n.attrs["comm_src"] for n in first) == [0, 1]
    assert sum(n.attrs["comm_size"] for n in first) == first[0].attrs["ir_size"]
