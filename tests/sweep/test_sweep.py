"""Sweeps: expansion, ids, resume, failure isolation, timeouts, errors, tables (fake runs in child processes)."""
from __future__ import annotations

import csv
import json
import sys
import time
import types
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from heterosim.errors import ConfigError, UserError
from heterosim.sweep import SweepConfig, expand, load_sweep, point_id, run_sweep
from heterosim.sweep.results import flatten, select_metrics

import sweep_fakes

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"


def write_sweep(tmp_path: Path, **fields) -> Path:
    data = {"scenario": str(QUICKSTART), **fields}
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def runs(out: Path) -> list[str]:
    log = out / "runs.log"
    return log.read_text().split() if log.exists() else []


def read_csv(path: Path) -> list[dict]:
    with open(path) as fh:
        return list(csv.DictReader(fh))


# ------------------------------------------------------------------ expansion and ids

def test_grid_is_cartesian_product():
    cfg = SweepConfig(scenario="x.yaml", parameters={"a": [1, 2, 3], "b.c": [True, False]})
    pts = expand(cfg)
    assert len(pts) == 6
    assert [p.params for p in pts[:2]] == [{"a": 1, "b.c": True}, {"a": 1, "b.c": False}]
    assert len({p.id for p in pts}) == 6
    assert [p.index for p in pts] == list(range(6))


def test_list_zips_and_needs_equal_lengths(tmp_path):
    cfg = SweepConfig(scenario="x.yaml", mode="list", parameters={"a": [1, 2], "b": [10, 20]})
    assert [p.params for p in expand(cfg)] == [{"a": 1, "b": 10}, {"a": 2, "b": 20}]
    bad = write_sweep(tmp_path, mode="list", parameters={"a": [1, 2], "b": [1]})
    with pytest.raises(ConfigError) as exc:
        load_sweep(bad)
    msg = str(exc.value)
    assert str(bad) in msg and "parameters" in msg and "equal length" in msg and "\n" not in msg


def test_ids_are_stable_and_depend_only_on_values():
    assert point_id({"a": 1, "b": 2}) == point_id({"b": 2, "a": 1})
    assert point_id({"a": 1}) != point_id({"a": 2})
    assert point_id({"a": 1}) != point_id({"b": 1})
    assert point_id({"a": 1}).startswith("p-") and len(point_id({"a": 1})) == 14
    small = expand(SweepConfig(scenario="x", parameters={"a": [1, 2]}))
    big = expand(SweepConfig(scenario="x", parameters={"a": [0, 1, 2, 3]}))
    assert {p.id for p in small} <= {p.id for p in big}
    # same values expanded twice (another process, another day) -> same ids
    assert [p.id for p in small] == [p.id for p in expand(SweepConfig(scenario="y", parameters={"a": [1, 2]}))]


def test_duplicate_values_run_once():
    pts = expand(SweepConfig(scenario="x", parameters={"a": [1, 1, 2]}))
    assert [p.params["a"] for p in pts] == [1, 2]


# ------------------------------------------------------------------ bad input: one line naming file/field/value

@pytest.mark.parametrize("fields, field, value", [
    ({"parameters": {"seed": [1]}, "bogus": 3}, "bogus", "3"),
    ({"parameters": {"seed": [1]}, "mode": "zip"}, "mode", "'zip'"),
    ({"parameters": {"seed": []}}, "parameters", None),
    ({"parameters": {"seed": [1]}, "timeout_s": -1}, "timeout_s", "-1"),
    ({"parameters": {"seed": 5}}, "parameters.seed", "5"),
])
def test_bad_sweep_yaml_is_one_line(tmp_path, fields, field, value):
    p = write_sweep(tmp_path, **fields)
    with pytest.raises(ConfigError) as exc:
        load_sweep(p)
    msg = str(exc.value)
    assert msg.startswith(f"{p}: {field}") and "\n" not in msg
    if value is not None:
        assert f"= {value}" in msg


def test_parameter_path_that_names_no_field_stops_the_sweep(tmp_path):
    p = write_sweep(tmp_path, parameters={"network.ecn.kmn_kb": [100, 200]})
    with pytest.raises(ConfigError) as exc:
        run_sweep(p, out=tmp_path / "out", run_fn=sweep_fakes.fake_run)
    msg = str(exc.value)
    assert msg.startswith(f"{p}: parameters.network.ecn.kmn_kb = 100") and "unknown field" in msg
    assert not (tmp_path / "out" / "runs.log").exists()


def test_missing_scenario_and_bad_options(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("scenario: nope.yaml\nparameters: {seed: [1]}\n")
    with pytest.raises(ConfigError, match=r"s.yaml: scenario = 'nope.yaml': scenario file not found"):
        run_sweep(p, out=tmp_path / "o")
    ok = write_sweep(tmp_path, parameters={"seed": [1]})
    with pytest.raises(UserError, match="--executor = 'dask'"):
        run_sweep(ok, executor="dask", out=tmp_path / "o")
    with pytest.raises(UserError, match="--timeout = 0"):
        run_sweep(ok, timeout_s=0, out=tmp_path / "o")


# ------------------------------------------------------------------ running (fake runs, real child processes)

def test_grid_sweep_writes_points_table_and_plot(tmp_path):
    sweep = write_sweep(tmp_path, parameters={"network.ecn.kmin_kb": [100, 400, 800], "network.pfc.enabled": [True, False]})
    out = tmp_path / "out"
    res = run_sweep(sweep, jobs=2, out=out, run_fn=sweep_fakes.fake_run)
    assert res.ok and res.counts == {"ok": 6} and len(res.ran) == 6
    rows = read_csv(out / "results.csv")
    assert len(rows) == 6
    for r in rows:
        d = out / "points" / r["id"]
        assert (d / "summary.json").exists()
        point = json.loads((d / "point.json").read_text())
        assert point["status"] == "ok" and point["params"]["network.ecn.kmin_kb"] == int(r["network.ecn.kmin_kb"])
        kmin, pfc = float(r["network.ecn.kmin_kb"]), r["network.pfc.enabled"] == "True"
        expect = 1.0 + kmin / 1e4 + (0.0 if pfc else 0.05)
        assert float(r["iteration_time_s"]) == pytest.approx(expect)
        assert int(r["net.pfc_pause_frames"]) == (0 if pfc else 3)
        assert int(r["net.ecn_marks"]) == int(kmin)
        assert float(r["breakdown.exposed_comm.tp"]) == pytest.approx(0.1)
        assert r["status"] == "ok" and r["error"] == ""
    cols = list(rows[0])
    assert cols[:3] == ["id", "network.ecn.kmin_kb", "network.pfc.enabled"]
    assert "per_rank" not in " ".join(cols) and not any(c.startswith("net.per_link") for c in cols)
    assert (out / "summary.png").stat().st_size > 1000
    manifest = json.loads((out / "sweep.json").read_text())
    assert len(manifest["points"]) == 6


def test_resume_skips_finished_points(tmp_path):
    sweep = write_sweep(tmp_path, parameters={"seed": [1, 2]})
    out = tmp_path / "out"
    first = run_sweep(sweep, out=out, run_fn=sweep_fakes.fake_run)
    assert sorted(runs(out)) == sorted(p.id for p in first.points)
    again = run_sweep(sweep, out=out, run_fn=sweep_fakes.fake_run)
    assert again.ran == [] and again.counts == {"ok": 2}
    assert len(runs(out)) == 2  # nothing ran a second time
    sweep.write_text(yaml.safe_dump({"scenario": str(QUICKSTART), "parameters": {"seed": [1, 2, 3]}}))
    more = run_sweep(sweep, out=out, run_fn=sweep_fakes.fake_run)
    assert len(more.ran) == 1 and len(runs(out)) == 3 and more.counts == {"ok": 3}
    assert len(read_csv(out / "results.csv")) == 3


def test_crash_and_exception_are_recorded_and_others_finish(tmp_path):
    sweep = write_sweep(tmp_path, parameters={"seed": [1, 13, 7, 2]})
    out = tmp_path / "out"
    res = run_sweep(sweep, jobs=2, out=out, run_fn=sweep_fakes.fake_run)
    by_seed = {r["seed"]: r for r in res.rows}
    assert by_seed[1]["status"] == by_seed[2]["status"] == "ok"
    assert by_seed[13]["status"] == "crash" and "SIGSEGV" in by_seed[13]["error"]
    assert by_seed[7]["status"] == "error" and by_seed[7]["error"] == "ValueError: seed 7 is unlucky"
    assert "iteration_time_s" not in by_seed[13]
    assert not res.ok
    rows = {r["seed"]: r for r in read_csv(out / "results.csv")}
    assert rows["13"]["status"] == "crash" and rows["13"]["iteration_time_s"] == ""
    # resuming retries the failed points only
    n = len(runs(out))
    again = run_sweep(sweep, out=out, run_fn=sweep_fakes.fake_run)
    assert sorted(again.ran) == sorted([by_seed[13]["id"], by_seed[7]["id"]])
    assert len(runs(out)) == n + 2


def test_timeout_is_recorded_and_process_killed(tmp_path):
    sweep = write_sweep(tmp_path, parameters={"seed": [666, 1]}, timeout_s=3)
    out = tmp_path / "out"
    t0 = time.monotonic()
    res = run_sweep(sweep, jobs=2, out=out, run_fn=sweep_fakes.fake_run)
    assert time.monotonic() - t0 < 30
    by_seed = {r["seed"]: r for r in res.rows}
    assert by_seed[666]["status"] == "timeout" and "timeout_s = 3" in by_seed[666]["error"]
    assert by_seed[1]["status"] == "ok"
    point = json.loads((out / "points" / by_seed[666]["id"] / "point.json").read_text())
    assert point["status"] == "timeout" and point["wall_s"] >= 3


def test_invalid_value_marks_its_point_only(tmp_path):
    sweep = write_sweep(tmp_path, parameters={"network.ecn.kmin_kb": [-1, 100]})
    res = run_sweep(sweep, out=tmp_path / "out", run_fn=sweep_fakes.fake_run)
    by = {r["network.ecn.kmin_kb"]: r for r in res.rows}
    assert by[-1]["status"] == "invalid" and "network.ecn.kmin_kb = -1" in by[-1]["error"]
    assert by[100]["status"] == "ok"
    assert len(runs(tmp_path / "out")) == 1


def test_worker_writes_summary_when_run_fn_only_returns_it(tmp_path):
    sweep = write_sweep(tmp_path, parameters={"seed": [3]}, metrics=["iteration_time_s"])
    res = run_sweep(sweep, out=tmp_path / "out", run_fn=sweep_fakes.returns_only)
    assert res.rows[0]["iteration_time_s"] == 2.0
    assert "mfu" not in res.rows[0]  # only the metrics asked for


def test_model_input_resolves_scenario_against_base_dir(tmp_path):
    cfg = SweepConfig(scenario="quickstart.yaml", parameters={"seed": [1]}, out=str(tmp_path / "o"))
    res = run_sweep(cfg, base_dir=QUICKSTART.parent, run_fn=sweep_fakes.fake_run)
    assert res.out_dir == (tmp_path / "o").resolve() and res.ok


def test_parquet_matches_csv(tmp_path):
    import pyarrow.parquet as pq  # in the test extra: this test must run, never skip

    sweep = write_sweep(tmp_path, parameters={"seed": [1, 2]})
    res = run_sweep(sweep, out=tmp_path / "out", run_fn=sweep_fakes.fake_run)
    table = pq.read_table(res.parquet).to_pylist()
    assert [r["iteration_time_s"] for r in table] == [r["iteration_time_s"] for r in res.rows]


def test_metric_selection():
    summary = {"a": 1, "b": {"c": 2.0, "d": {"e": 3}}, "lst": [1, 2]}
    assert flatten(summary) == {"a": 1, "b.c": 2.0, "b.d.e": 3}
    assert select_metrics(summary, {"pfc": 4}, ["a", "b.*", "net.pfc", "missing"]) == \
        {"a": 1, "b.c": 2.0, "b.d.e": 3, "net.pfc": 4}


# ------------------------------------------------------------------ ray executor

def test_ray_missing_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    sweep = write_sweep(tmp_path, parameters={"seed": [1]})
    with pytest.raises(UserError, match=r"--executor = 'ray': needs the 'ray' package"):
        run_sweep(sweep, executor="ray", out=tmp_path / "o", run_fn=sweep_fakes.fake_run)


class _FakeRay(types.ModuleType):
    """Just enough of Ray's API, run in-process, to check the driver's bookkeeping and file shipping."""

    def __init__(self):
        super().__init__("ray")
        self.inited = None
        self.options = None
        self.cancelled = []

    def is_initialized(self):
        return self.inited is not None

    def init(self, address=None, **kw):
        self.inited = address

    def remote(self, **options):
        self.options = options

        def wrap(fn):
            ray = self

            class Remote:
                def remote(self, *args):
                    return ray._Ref(fn, args)
            return Remote()
        return wrap

    class _Ref:
        def __init__(self, fn, args):
            self.fn, self.args = fn, args

    def wait(self, refs, num_returns=1, timeout=None):
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref):
        return ref.fn(*ref.args)

    def cancel(self, ref, force=False):
        self.cancelled.append(ref)


def test_ray_executor_ships_files_back(tmp_path, monkeypatch):
    fake = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    sweep = write_sweep(tmp_path, parameters={"seed": [1, 7]})
    out = tmp_path / "out"
    res = run_sweep(sweep, executor="ray", address="ray://head:10001", jobs=2, out=out, run_fn=sweep_fakes.fake_run)
    assert fake.inited == "ray://head:10001" and fake.options["max_calls"] == 1
    by_seed = {r["seed"]: r for r in res.rows}
    assert by_seed[1]["status"] == "ok" and by_seed[7]["status"] == "error"
    assert (out / "points" / by_seed[1]["id"] / "network.json").exists()
    assert float(by_seed[1]["net.pfc_pause_frames"]) == 0


@pytest.mark.slow
def test_ray_executor_on_a_real_local_ray(tmp_path):
    """The executor against a real Ray (not the fake above): one real quickstart point on a local cluster.

    CI installs ``ray`` (the ``test`` extra) and runs this (~25 s on 2 cores, most of it Ray's head start);
    the fakes above cover the error paths. Skipped only where ``ray`` is not installed."""
    ray = pytest.importorskip("ray", reason="ray is not installed (the 'ray' extra; see the docstring)")
    sweep = write_sweep(tmp_path, parameters={"seed": [1], "output.plots": [False], "output.trace": [False]})
    try:
        res = run_sweep(sweep, executor="ray", jobs=1, out=tmp_path / "out", timeout_s=300)
    finally:
        if ray.is_initialized():
            ray.shutdown()
    assert res.ok, res.rows
    d = res.out_dir / "points" / res.rows[0]["id"]
    assert json.loads((d / "summary.json").read_text())["iteration_time_s"] > 0


# ------------------------------------------------------------------ CLI

def _cli():
    from heterosim.sweep.cli import app
    return app


def test_cli_bad_sweep_exits_2_with_one_line(tmp_path):
    p = write_sweep(tmp_path, parameters={"seed": [1]}, colour="blue")
    r = CliRunner().invoke(_cli(), [str(p), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2
    assert "colour = 'blue': unknown field" in r.output and "Traceback" not in r.output


# ------------------------------------------------------------------ a real (tiny) sweep

def _quickstart_runs() -> bool:
    try:
        import heterosim.workload.compiler  # noqa: F401
        import heterosim.workload.memory  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _quickstart_runs(), reason="workload compiler not available yet")
def test_real_sweep_over_quickstart(tmp_path):
    sweep = write_sweep(tmp_path, parameters={"fabric.uplink_gbps": [100, 400], "output.plots": [False],
                                              "output.trace": [False], "output.tables": ["ops"]})
    res = run_sweep(sweep, jobs=2, out=tmp_path / "out", timeout_s=300)
    assert res.ok, res.rows
    by = {r["fabric.uplink_gbps"]: r for r in res.rows}
    assert by[100]["iteration_time_s"] > by[400]["iteration_time_s"] > 0
    assert by[100]["net.bytes_delivered"] > 0
    d = res.out_dir / "points" / by[400]["id"]
    assert (d / "ops.csv").exists() and not (d / "trace.json").exists()
    assert json.loads((d / "summary.json").read_text())["scenario"] == "quickstart"


@pytest.mark.skipif(not _quickstart_runs(), reason="workload compiler not available yet")
def test_cli_runs_a_real_sweep_and_resumes(tmp_path):
    sweep = write_sweep(tmp_path, parameters={"fabric.uplink_gbps": [200], "output.plots": [False],
                                              "output.trace": [False]})
    out = tmp_path / "out"
    r = CliRunner().invoke(_cli(), [str(sweep), "--out", str(out), "--timeout", "300"])
    assert r.exit_code == 0, r.output
    assert "ok 1" in r.output and "results.csv" in r.output
    mtime = (out / "points").stat().st_mtime_ns, next((out / "points").iterdir()).stat().st_mtime_ns
    r = CliRunner().invoke(_cli(), [str(sweep), "--out", str(out), "-q"])
    assert r.exit_code == 0 and r.output == ""
    assert next((out / "points").iterdir()).stat().st_mtime_ns == mtime[1]  # not re-run


def test_progress_bar_and_failed_exit_code(tmp_path, capsys):
    sweep = write_sweep(tmp_path, parameters={"seed": [1, 7]})
    res = run_sweep(sweep, out=tmp_path / "out", run_fn=sweep_fakes.fake_run, progress=True)
    assert res.counts == {"ok": 1, "error": 1}
    err = capsys.readouterr().err
    assert "2/2" in err and "error:1" in err and "ok:1" in err


def test_command_line_overrides_reach_every_point_and_pin_the_resume(tmp_path):
    # `heterosim sweep --measurements X` = hardware.measurements=X on every point; a point's own value wins
    sweep = write_sweep(tmp_path, parameters={"seed": [1, 2]})
    out = tmp_path / "out"
    res = run_sweep(sweep, out=out, run_fn=sweep_fakes.fake_run_recording_overrides,
                    overrides={"hardware.measurements": "none"})
    assert res.ok
    for p in res.points:
        got = json.loads((out / "points" / p.id / "overrides.json").read_text())
        assert got == {"hardware.measurements": "none", "seed": p.params["seed"]}
    with pytest.raises(UserError, match=r"--measurements = 'builtin': this sweep folder was started with "
                                        r"hardware.measurements = none"):
        run_sweep(sweep, out=out, run_fn=sweep_fakes.fake_run_recording_overrides,
                  overrides={"hardware.measurements": "builtin"})


def test_cli_measurements_flag_checks_the_folder(tmp_path):
    p = write_sweep(tmp_path, parameters={"seed": [1]})
    r = CliRunner().invoke(_cli(), [str(p), "--out", str(tmp_path / "o"), "--measurements", str(tmp_path / "nope")])
    assert r.exit_code == 2
    assert "--measurements = " in r.output and "not a folder of measured tables" in r.output
    assert "Traceback" not in r.output and not (tmp_path / "o").exists()
