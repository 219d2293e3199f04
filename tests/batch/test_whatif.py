"""``heterosim whatif``: what it writes, what it refuses (one line, exit 2, nothing written), and that a
variant that changes the program is refused rather than batched."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from cli_helpers import cli_in_process, one_line, one_line_message
from heterosim import pipeline
from heterosim.batch.variants import Variant, check_variant
from heterosim.errors import UserError
from heterosim.sim.program import export_program

HERE = Path(__file__).parent
INCAST = HERE / "incast.yaml"


def test_whatif_writes_every_variant_ranked(tmp_path, capsys, monkeypatch):
    out = tmp_path / "wi"
    code, stdout, err = cli_in_process(capsys, monkeypatch, tmp_path, "whatif", INCAST, "--engine", "numpy",
                                       "--vary", "gpu=1.5", "--vary", "hop-latency=0,1000", "--vary", "ecmp-seed=1-3",
                                       "--out", out, "-q")
    assert code == 0, err
    rows = list(csv.DictReader(open(out / "variants.csv")))
    assert len(rows) == 1 + 5 + 2 + 3  # baseline, 5 GPUs, 2 latencies, 3 seeds
    base = int(rows[0]["iteration_time_ns"])
    # the receiver is alone in its stage: slowing it slows the iteration most (the flow backend agrees:
    # test_batch_engine.py); its row is first in the ranking
    ranked = list(csv.DictReader(open(out / "sensitivity.csv")))
    assert ranked[0]["target"] == "one-0/gpu0"
    assert int(ranked[0]["iteration_time_ns"]) > base
    assert (out / ".heterosim-results").is_file()
    assert (out / "summary.json").is_file()
    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(out / "variants.parquet").to_pydict()
    assert table["iteration_time_ns"] == [int(r["iteration_time_ns"]) for r in rows]


def test_whatif_refuses_a_folder_it_did_not_create(tmp_path, capsys, monkeypatch):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    code, stdout, err = cli_in_process(capsys, monkeypatch, tmp_path, "whatif", INCAST, "--engine", "numpy",
                                       "--vary", "gpu=1.5", "--out", out)
    one_line(code, err, "--out", "not written by HeteroSim")
    assert (out / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("spec,needle", [
    ("parallelism.pp=4", "changes the program"),
    ("link=0", "failed link re-routes"),
    ("gpu=0.5", "slowdown must be >= 1"),
    ("stragglers=3x9@1.2", "K <= 5"),
    ("hop-latency=-1", ">= 0"),
    ("ecmp-seed=-1", "seeds >= 0"),
    ("bogus=1", "unknown kind"),
    ("fail=leaf0", "fail=switches or fail=A:B"),
    ("nic=0", "> 0"),
])
def test_whatif_refuses_bad_variants_in_one_line(tmp_path, capsys, monkeypatch, spec, needle):
    code, stdout, err = cli_in_process(capsys, monkeypatch, tmp_path, "whatif", INCAST, "--engine", "numpy",
                                       "--vary", spec, "--out", tmp_path / "x")
    one_line(code, err, "--vary", needle)
    assert not (tmp_path / "x").exists()


def test_whatif_runs_the_default_compute_contention(tmp_path):
    """sm_share (the default) is no longer refused: the baseline equals the flow backend's run with every lane
    simulated, and the program carries it."""
    from heterosim.whatif import whatif

    sc = pipeline.load(INCAST, ["simulation.compute_contention=sm_share"])
    res = whatif(sc, ["hop-latency=0"], engine="numpy")
    want = pipeline.simulate(pipeline.prepare(sc), symmetry=False, record_messages=False).sim.iteration_time_ns
    assert res.baseline_ns == want
    assert "sm_share" in res.info["reproduces"]


def test_a_degraded_link_must_exist_and_keep_some_rate():
    prep = pipeline.prepare(pipeline.load(INCAST))
    prog = export_program(prep)
    with pytest.raises(UserError) as exc:
        check_variant(prog, Variant(degrade=(("gh-0/nic0", "spine9", 0.5),)), prep.system)
    one_line_message(exc, "no fabric link")
    with pytest.raises(UserError) as exc:
        check_variant(prog, Variant(degrade=(("gh-0/nic0", "leaf0", 0.0),)), prep.system)
    one_line_message(exc, "re-routes")


def test_one_node_program_without_flows(tmp_path):
    """A single-node scenario (every collective in closed form, no flow): the engine still runs it, equal to the
    flow backend's run, baseline and straggler."""
    from heterosim.batch import engine, variants

    sc = pipeline.load(INCAST, ["cluster.groups=[{name: h, node_type: dgx-h100, num_nodes: 1}]",
                                "parallelism.stage_tp=null", "parallelism.tp=2", "parallelism.pp=2",
                                "parallelism.layer_partition=null", "parallelism.dp=2"])
    prep = pipeline.prepare(sc)
    prog = export_program(prep)
    assert prog.num_flows == 0
    vs = [Variant(), Variant(stragglers=(("h-0/gpu3", 1.3),))]
    got = engine.run_numpy(prog, variants.params(prog, vs, prep.system)).iteration_time_ns.tolist()
    want = []
    for v in vs:
        s2 = pipeline.with_overrides(sc, v.overrides(sc)) if v.overrides(sc) else sc
        want.append(pipeline.simulate(pipeline.prepare(s2), symmetry=False, record_messages=False).sim.iteration_time_ns)
    assert got == want


def test_whatif_fails_every_switch_link_one_at_a_time(tmp_path):
    """``--vary fail=switches``: one variant per pair of switch ends; each re-routes, and one of them equals the
    flow backend run on the fabric without that link."""
    from heterosim.whatif import whatif

    sc = pipeline.load(HERE / "pp-bubble.yaml")
    res = whatif(sc, ["fail=switches"], engine="numpy")
    sw = set(pipeline.prepare(sc).system.net.switches)
    pairs = {(l.a, l.b) for l in pipeline.prepare(sc).system.net.links if l.a in sw and l.b in sw}
    assert len(res.variants) == 1 + len(pairs)
    v = res.variants[1]
    want = pipeline.simulate(v.prepare(sc), symmetry=False, record_messages=False).sim.iteration_time_ns
    assert int(res.times_ns[1]) == want


def test_whatif_refuses_uneven_moe_routing_in_one_line(tmp_path, capsys, monkeypatch):
    """Uneven routing's dispatch / combine are all-to-allvs with per-pair sizes (Op.peer_bytes) in the coordinator;
    the program's collectives are uniform, so the batch engine must refuse the scenario rather than run a uniform
    stand-in (heterosim run simulates it)."""
    scenario = HERE.parents[1] / "scenarios" / "moe" / "uneven-routing.yaml"
    code, stdout, err = cli_in_process(capsys, monkeypatch, tmp_path, "whatif", scenario, "--engine", "numpy",
                                       "--vary", "gpu=1.2", "--out", tmp_path / "x")
    one_line(code, err, "parallelism.moe_load_imbalance = 2.0", "per-pair sizes")
    assert not (tmp_path / "x").exists()
