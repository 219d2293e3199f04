"""Third-party Chakra traces (tests/chakra/data, sources in data/SOURCES) replayed as ASTRA-sim reads them.

Each expected time is worked out here by hand, with NCCL's cost model on the scenario's links, not taken from
HeteroSim's output:

* links: one GH200 per node (``gpus_per_node: 1``), one 200 Gb/s NIC each (``nics_per_node: 1``,
  topologies/node_types.yaml ``gh200.nic_gbps``), so up to 16 nodes hang off one leaf switch (leaf-spine,
  16 hosts per leaf; with the node type's 4 NICs, 8 nodes would span two leaves and a spine): B = 25e9 B/s; a
  message crosses 2 links of 500 ns and 1 switch of 500 ns (``fabric.link_delay_ns``,
  ``network.per_hop_latency_ns`` defaults): 1.5 us; 4096-byte packets carry 78 bytes of headers
  (``network.mtu_bytes``/``header_bytes`` defaults): wire bytes = payload x 4096 / 4018;
* NCCL's latency model (src/graph/tuning.cc, NCCL 2.19+) for the Simple protocol over the network:
  baseLat 8.4 us once per operation, hwLat 14.0 us per ring step; the scenarios pin ``comm: {algorithm:
  ring, protocol: simple, channels: 1}`` (ASTRA-sim's examples run rings too);
* ring all-reduce: 2(n-1) steps moving 2(n-1)/n x S per rank; ring all-gather of an input s per rank:
  n-1 steps moving (n-1) s; ring reduce-scatter of S: n-1 steps moving (n-1)/n x S; all-to-all of S per
  rank: one round, (n-1)/n x S leaving each NIC at once; a send: one step.

The closed form leaves out what the flow-level network adds on top of line rate and fixed latencies: the
partial last packet of every transfer and chunk pipelining inside a ring step. ``TOL`` bounds that: 2 %
of the expected time.
"""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("google.protobuf")

from heterosim import api  # noqa: E402
from heterosim.config.loader import scenario_from_dict  # noqa: E402
from heterosim.errors import UserError  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
B = 200e9 / 8  # bytes/s of one NIC
WIRE = 4096 / (4096 - 78)  # header overhead per payload byte
PROP_NS = 2 * 500 + 500  # two links and one switch
BASE_NS, HW_NS = 8_400, 14_000  # NCCL tuning.cc, Simple, ring rows, network
TOL = 0.02
PINNED = {"algorithm": "ring", "protocol": "simple", "channels": 1}


def scenario(folder: Path, n: int, comm: dict | None = PINNED, **workload) -> dict:
    d = {"name": "third_party", "workload": {"chakra": str(folder), **workload}, "training": {"global_batch_size": 1},
         "cluster": {"groups": [{"name": "gh", "node_type": "gh200", "num_nodes": n,
                                 "overrides": {"gpus_per_node": 1, "nics_per_node": 1}}]}}
    if comm is not None:
        d["comm"] = comm
    return d


def run_ns(d: dict) -> int:
    prep = api.prepare(scenario_from_dict(d))
    return api.simulate(prep, record_messages=False).summary["iteration_time_ns"]


def wire_ns(payload_bytes: float) -> float:
    return payload_bytes * WIRE / B * 1e9


def expected_ns(collective: str, n: int, size: int) -> float:
    """NCCL's cost model by hand (module docstring); ``size`` = the trace's comm_size as ASTRA-sim reads it."""
    if collective == "all_reduce":
        steps, per_rank = 2 * (n - 1), 2 * (n - 1) / n * size
    elif collective == "all_gather":  # comm_size = each rank's input (ASTRA-sim's Ring.cc)
        steps, per_rank = n - 1, (n - 1) * size
    elif collective == "reduce_scatter":
        steps, per_rank = n - 1, (n - 1) / n * size
    elif collective == "all_to_all":
        steps, per_rank = 1, (n - 1) / n * size
    else:
        raise ValueError(collective)
    return BASE_NS + steps * (HW_NS + PROP_NS) + wire_ns(per_rank)


MICRO = [(c, n) for c in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all") for n in (4, 8, 16)]


@pytest.mark.parametrize("collective, n", MICRO)
def test_astra_sim_microbenchmark(collective, n):
    """ASTRA-sim's shipped microbenchmarks: one 1 MiB collective per rank, no process group (= every rank)."""
    folder = DATA / "astra_microbench" / collective / f"{n}npus_1MB"
    want = expected_ns(collective, n, 1 << 20)
    got = run_ns(scenario(folder, n))
    assert abs(got - want) <= TOL * want, (got, want)


def test_all_gather_size_is_each_ranks_input():
    """The IR holds the gathered output (nccl-tests): n x the trace's comm_size under ASTRA-sim's reading;
    the nccl-tests reading keeps comm_size as the output and so moves n times less."""
    folder = DATA / "astra_microbench" / "all_gather" / "8npus_1MB"
    prep = api.prepare(scenario_from_dict(scenario(folder, 8)))
    assert [(o.collective, o.size_bytes) for o in prep.ir.ops_of(3)] == [("allgather", 8 << 20)]
    old = scenario(folder, 8, chakra_convention="nccl-tests")
    assert [o.size_bytes for o in api.prepare(scenario_from_dict(old)).ir.ops_of(3)] == [1 << 20]
    want = BASE_NS + 7 * (HW_NS + PROP_NS) + wire_ns(7 * (1 << 20) / 8)
    got = run_ns(old)
    assert abs(got - want) <= TOL * want, (got, want)


def msccl_send_ns(size: int) -> float:
    """One send of the MSCCL ring: one network step."""
    return BASE_NS + HW_NS + PROP_NS + wire_ns(size)


def test_msccl_ring_all_reduce_runs_with_eager_sends():
    """ASTRA-sim's MSCCL ring all-reduce (8 GPUs, 1 MiB): sends name only comm_dst, receives only comm_src.

    Each rank: send chunk, receive chunk (the receive depends on the send), reduce 7 us, and again: 14
    send/receive pairs, 7 of them followed by a reduce. A send starts at once (its receive is posted ahead,
    ASTRA-sim's eager semantics) and the ring is symmetric, so every pair takes one send's time T (the
    receive's message arrives when the rank's own send does): 14 T + 7 x 7 us."""
    folder = DATA / "msccl_ring_allreduce_8npus_1MB"
    d = scenario(folder, 8)
    prep = api.prepare(scenario_from_dict(d))
    sends = [o for o in prep.ir.ops_of(0) if o.collective == "send"]
    assert len(sends) == 14 and {o.size_bytes for o in sends} == {131072}
    want = 14 * msccl_send_ns(131072) + 7 * 7_000
    got = run_ns(d)
    assert abs(got - want) <= TOL * want, (got, want)


def test_msccl_ring_with_rendezvous_sends_would_deadlock_and_is_refused_before_simulating():
    """With sends that wait for their receive (HeteroSim's compiled pipelines), every rank's first send
    waits for a receive its successor posts only after its own first send: a cycle. It is found by the
    import check (one line, the node and the rank it waits for), as ``validate`` reports it."""
    folder = DATA / "msccl_ring_allreduce_8npus_1MB"
    with pytest.raises(UserError) as exc:
        api.prepare(scenario_from_dict(scenario(folder, 8, chakra_sends="rendezvous")))
    msg = str(exc.value)
    assert "\n" not in msg and "custom_allreduce.0.et: node[id=0].comm_dst" in msg
    assert "would deadlock" in msg and "8 rank(s) stuck" in msg


def test_pytorch_converted_trace_is_refused_in_one_line():
    """Chakra's feeder test trace (a one-rank PyTorch trace, gzipped here): a node depends on itself
    (node 3511 ctrl_deps [3511]); ASTRA-sim's feeder rejects the graph as well."""
    folder = DATA / "chakra_feeder_pytorch_1rank"
    with pytest.raises(UserError) as exc:
        api.prepare(scenario_from_dict(scenario(folder, 1, comm=None)))
    msg = str(exc.value)
    assert "\n" not in msg and "chakra.0.et: node[id=" in msg


def test_msccl_ring_with_both_ends_written_runs_the_same(tmp_path):
    """The same ring with comm_src/comm_dst both filled in (the own end = the file's rank) is the same
    workload: it used to hang (``8 lane(s) stuck``) because a send waited for its receive."""
    from heterosim.chakra import schema as S

    src = DATA / "msccl_ring_allreduce_8npus_1MB"
    dst = tmp_path / "both"
    dst.mkdir()
    for r in range(8):
        frames = [p for _, p in S.iter_frames((src / f"custom_allreduce.{r}.et").read_bytes())]
        with open(dst / f"custom_allreduce.{r}.et", "wb") as fh:
            gm = S.GlobalMetadata()
            gm.ParseFromString(frames[0])
            S.write_message(fh, gm)
            for payload in frames[1:]:
                n = S.Node()
                n.ParseFromString(payload)
                names = {a.name for a in n.attr}
                if n.type == S.NODE_TYPES["COMM_SEND_NODE"] and "comm_src" not in names:
                    n.attr.append(S.attr("comm_src", r, "int32"))
                if n.type == S.NODE_TYPES["COMM_RECV_NODE"] and "comm_dst" not in names:
                    n.attr.append(S.attr("comm_dst", r, "int32"))
                S.write_message(fh, n)
    assert run_ns(scenario(dst, 8)) == run_ns(scenario(src, 8))


def test_symbolic_tensor_graph_trace_by_hand():
    """symbolic_tensor_graph's trace of a 2-layer transformer on 4 ranks (dp 2, tp 2): its compute nodes carry
    num_ops/tensor_size but no duration, so with ``timing: recorded`` they take 0 ns (one warning says how
    many: 74 per rank) and the iteration is its 26 collectives per rank, one after another (ASTRA-sim runs one
    communication node at a time per rank) and alike on every rank. Their sizes and groups are read from the
    files by the independent wire reader of test_chakra_astra_semantics (pg_name -> workload.json, the group
    file named after the traces), each timed by NCCL's model by hand (module docstring), summed."""
    import json
    import warnings

    from test_chakra_astra_semantics import decode

    folder = DATA / "stg_llama_dp2_tp2"
    groups = {int(k): v for k, v in json.loads((folder / "workload.json").read_text()).items()}
    names = {0: "all_reduce", 2: "all_gather", 7: "reduce_scatter", 6: "all_to_all"}
    per_rank = []
    for r in range(4):
        _, nodes = decode(folder / f"workload.{r}.et")
        colls = [a for _, ntype, a in nodes if ntype == 7]
        assert len(colls) == 26 and all(r in groups[int(a["pg_name"])] for a in colls)
        per_rank.append(sum(expected_ns(names[a["comm_type"]], len(groups[int(a["pg_name"])]), a["comm_size"])
                            for a in colls))
    want = max(per_rank)
    with warnings.catch_warnings(record=True) as got_warnings:
        warnings.simplefilter("always")
        prep = api.prepare(scenario_from_dict(scenario(folder, 4)))
    assert [str(w.message).split(" compute node")[0] for w in got_warnings] == ["296"]
    got = api.simulate(prep, record_messages=False).summary["iteration_time_ns"]
    assert abs(got - want) <= TOL * want, (got, want)
    # re-timed by the compute model, the same collectives plus compute: longer
    retimed = run_ns(scenario(folder, 4, timing="compute_model"))
    assert retimed > got


def test_tutorial_all_reduce_8_npus():
    """ASTRA-sim's MICRO 2024 tutorial, demo 1: the same 1 MiB all-reduce, written with involved_dim."""
    folder = DATA / "tutorial_micro2024_allreduce_8npus"
    want = expected_ns("all_reduce", 8, 1 << 20)
    got = run_ns(scenario(folder, 8))
    assert abs(got - want) <= TOL * want, (got, want)


def test_tutorial_mlp_model_parallel_32_npus():
    """ASTRA-sim's MICRO 2024 tutorial, demo 2: per rank, 18 compute nodes (recorded durations) and 11
    collectives over all 32 ranks (no pg_name). Forward: compute, all-gather, compute... in a chain. Backward,
    per layer l from the last: input gradient IG_l, then the weight gradient WG_l and the all-reduce AR_l at
    once (both depend on IG_l only), and IG_{l-1} waits for both (layer 0 has no all-reduce). So the
    iteration is sum(FWD) + sum(AG) + sum(IG) + sum over layers of max(WG_l, AR_l), all by hand. 32 hosts
    on one leaf (``hosts_per_leaf: 32``)."""
    from test_chakra_astra_semantics import decode

    folder = DATA / "tutorial_micro2024_mlp_model_parallel_32npus"
    names = {0: "all_reduce", 2: "all_gather", 7: "reduce_scatter", 6: "all_to_all"}
    _, nodes = decode(folder / "MLP_ModelParallel.0.et")
    colls = [a for _, t, a in nodes if t == 7]
    assert len(colls) == 11 and all(a.get("pg_name") in (None, "") for a in colls)
    # compute, from the tutorial's ASTRA-sim 1.0 input table (GlobalMetadata input_file): per layer forward,
    # input-gradient and weight-gradient times in us; forward and input-gradient are equal in it
    fwd = [32291, 7488, 7488, 14144, 7488, 9984]  # layers 0..5; IG_l = FWD_l
    wg = [12864, 3648, 3456, 10368, 3648, 3456]
    ag = [expected_ns("all_gather", 32, a["comm_size"]) for a in colls if a["comm_type"] == 2]
    ar = [expected_ns("all_reduce", 32, a["comm_size"]) for a in colls if a["comm_type"] == 0]  # layers 5..1
    assert len(ag) == 6 and len(ar) == 5
    ar_of_layer = dict(zip(range(5, 0, -1), ar))
    want = 2 * sum(fwd) * 1000 + sum(ag) + sum(max(wg[l] * 1000, ar_of_layer.get(l, 0)) for l in range(6))
    d = scenario(folder, 32)
    d["fabric"] = {"kind": "leaf_spine", "hosts_per_leaf": 32}
    got = run_ns(d)
    assert abs(got - want) <= TOL * want, (got, want)
