"""Issue 14 through the real CLI entry point (in-process, for speed): never destroy what --out names,
bad flags as one line, validate runs every check run runs, the work budget, sweep/plan/collective/import-hf
flags. Each asserts exit 2, one line on stderr naming the file or flag, and nothing left behind."""
from __future__ import annotations

import json
import os
import stat
import textwrap

import pytest

from cli_helpers import cli_in_process, one_line
from tiny_scenario import TINY_YAML

GOOD = TINY_YAML


cli = cli_in_process


def listing(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


@pytest.fixture
def scen(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(textwrap.dedent(GOOD))
    return p


# ---------------------------------------------------------------- --out never destroys user data

@pytest.mark.parametrize("cmd", ["run", "compile"])
def test_out_pointing_at_a_file_is_refused_and_the_file_untouched(tmp_path, scen, capsys, monkeypatch, cmd):
    victim = tmp_path / "precious.txt"
    victim.write_text("user data\n")
    before = listing(tmp_path)
    extra = ["--quiet"] if cmd == "run" else []
    code, _, err = cli(capsys, monkeypatch, tmp_path, cmd, scen, "--out", victim, *extra)
    one_line(code, err, "--out", "precious.txt", "regular file")
    assert victim.read_text() == "user data\n"
    assert listing(tmp_path) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_out_pointing_at_a_device_is_refused(tmp_path, scen, capsys, monkeypatch):
    dev = tmp_path / "null"
    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a private node, never /dev/null itself
    code, _, err = cli(capsys, monkeypatch, tmp_path, "compile", scen, "--out", dev)
    one_line(code, err, "--out", "device")
    assert stat.S_ISCHR(dev.lstat().st_mode)


def test_out_pointing_at_a_fifo_or_symlink_is_refused(tmp_path, scen, capsys, monkeypatch):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, _, err = cli(capsys, monkeypatch, tmp_path, "compile", scen, "--out", fifo)
    one_line(code, err, "--out", "FIFO")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    code, _, err = cli(capsys, monkeypatch, tmp_path, "compile", scen, "--out", tmp_path / "link")
    one_line(code, err, "--out", "symbolic link")
    assert (tmp_path / "link").is_symlink() and not any((tmp_path / "real").iterdir())


def test_out_empty_string_is_refused_and_leaves_no_temp_dir(tmp_path, scen, capsys, monkeypatch):
    before = listing(tmp_path)
    code, _, err = cli(capsys, monkeypatch, tmp_path, "compile", scen, "--out", "")
    one_line(code, err, "--out", "names a directory")  # typer turns '' into Path('.')
    assert listing(tmp_path) == before


def test_out_foreign_directory_refused_own_directory_replaced(tmp_path, scen, capsys, monkeypatch):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    code, _, err = cli(capsys, monkeypatch, tmp_path, "compile", scen, "--out", mine)
    one_line(code, err, "--out", "not written by HeteroSim")
    assert listing(mine) == ["notes.txt"]
    out = tmp_path / "ir"
    for _ in range(2):  # the second run replaces the stamped folder of the first
        code, _, err = cli(capsys, monkeypatch, tmp_path, "compile", scen, "--out", out)
        assert code == 0, err
    assert listing(out) == [".heterosim-results", "ir.json", "summary.json"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ir.")]


def test_out_under_a_regular_file(tmp_path, scen, capsys, monkeypatch):
    (tmp_path / "f").write_text("x")
    code, _, err = cli(capsys, monkeypatch, tmp_path, "compile", scen, "--out", tmp_path / "f" / "sub")
    one_line(code, err, "--out", "ot a directory")
    assert (tmp_path / "f").read_text() == "x"


def test_png_and_json_do_not_overwrite_foreign_files(tmp_path, scen, capsys, monkeypatch):
    png = tmp_path / "curve.png"
    png.write_text("not a png")
    code, _, err = cli(capsys, monkeypatch, tmp_path, "collective", "--topology",
                       os.path.abspath("topologies/h100-single-node.yaml"), "--size", "1MiB", "--png", png)
    one_line(code, err, "--png", "not written by HeteroSim")
    assert png.read_text() == "not a png"
    js = tmp_path / "plan.json"
    js.write_text('{"mine": 1}')
    code, _, err = cli(capsys, monkeypatch, tmp_path, "plan", scen, "--top", "1", "--json", js)
    one_line(code, err, "--json", "not written by HeteroSim")
    assert json.loads(js.read_text()) == {"mine": 1}


# ---------------------------------------------------------------- bad flags: one line

@pytest.mark.parametrize("args,needles", [
    (["run", "S", "--bogus-flag"], ["run", "--bogus-flag"]),
    (["--bogus-flag"], ["--bogus-flag"]),
    (["run", "S", "-x"], ["run", "-x"]),
    (["run", "S", "--set"], ["--set"]),
    (["sweep"], ["sweep", "sweep"]),
    (["validate"], ["validate", "scenario"]),
    (["run", "S", "--quiet=3"], ["--quiet"]),
    (["collective", "--gpus", "x"], ["--gpus"]),
    (["nosuchcommand"], ["nosuchcommand"]),
    (["run", "S", "--backend", ""], ["--backend"]),
    (["plan", "S", "--top", "-1"], ["--top", "-1"]),
    (["collective", "--topology", "T", "--size", "1e30", "--json"], ["--size", "1 TiB"]),
    (["collective", "--topology", "T", "--size", "nan", "--json"], ["--size"]),
    (["collective", "--topology", "T", "--size", "1MiB", "--algo", "bogus", "--json"], ["--algo", "bogus"]),
    (["sweep", "W", "--timeout", "nan"], ["--timeout", "nan"]),
    (["sweep", "W", "--timeout", "-1"], ["--timeout"]),
    (["sweep", "BADPATH"], ["w.yaml", "parameters", "not a field path"]),
])
def test_bad_flags_are_one_line(tmp_path, scen, capsys, monkeypatch, args, needles):
    sweep = tmp_path / "w.yaml"
    sweep.write_text(f"scenario: {scen.name}\nparameters: {{seed: [1]}}\n")
    topo = os.path.abspath("topologies/h100-single-node.yaml")
    if "BADPATH" in args:
        sweep.write_text(f"scenario: {scen.name}\nparameters: {{'parallelism..tp': [1]}}\n")
    args = [{"S": scen, "W": sweep, "T": topo, "BADPATH": sweep}.get(a, a) for a in args]
    before = listing(tmp_path)
    code, _, err = cli(capsys, monkeypatch, tmp_path, *args)
    one_line(code, err, *needles)
    assert listing(tmp_path) == before


# ---------------------------------------------------------------- validate = every check of run

@pytest.mark.parametrize("override,field", [
    ("comm.algorithm=bogus", "comm.algorithm"),
    ("comm.protocol=bogus", "comm.protocol"),
    ("comm.algorithm=nvls", "comm.algorithm"),  # DGX A100 has no NVLS: the planner would refuse at run time
    ("network.backend=bogus", "network.backend"),
    ("network.background={cdf: bogus, load: 0.3}", "network.background.cdf"),
    ("network.background={cdf: websearch, load: 0.3, hosts: [nosuch/nic0, h100-0/nic0]}",
     "network.background.hosts"),
    ("network.background={cdf: websearch, load: 1.0}", "network.background.load"),
    ("network.header_bytes=5000", "network.header_bytes"),
])
def test_validate_refuses_what_run_would(tmp_path, capsys, monkeypatch, override, field):
    p = tmp_path / "s.yaml"
    p.write_text(textwrap.dedent(GOOD).replace("dgx-h100", "dgx-a100"))
    code, _, err = cli(capsys, monkeypatch, tmp_path, "validate", p, "--set", override)
    one_line(code, err, str(p), field)


@pytest.mark.parametrize("sets,field", [
    (["network.cc=hpcc", "network.acceleration.mode=auto"], "network.cc"),  # the case: no closed form
    (["network.cc=dcqcn", "network.cc_window=true", "network.acceleration.mode=auto"], "network.cc_window"),
    (["network.cc=hpcc", "network.acceleration.mode=auto", "network.acceleration.collisions=fluid"],
     "network.cc"),
])
def test_validate_says_what_run_says_when_the_backend_is_built(tmp_path, scen, capsys, monkeypatch, sets, field):
    """Every check made when building a backend (``NetworkBackend.check_config``) runs in validate: the
    same line, the same exit code, and run refuses before simulating (nothing written)."""
    pytest.importorskip("ns3", reason="the ns3 extra")
    argv = [a for kv in sets for a in ("--set", kv)] + ["--backend", "ns3"]
    v_code, _, v_err = cli(capsys, monkeypatch, tmp_path, "validate", scen, *argv)
    one_line(v_code, v_err, str(scen), field)
    r_code, _, r_err = cli(capsys, monkeypatch, tmp_path, "run", scen, *argv, "--out", tmp_path / "r", "--quiet")
    one_line(r_code, r_err, str(scen), field)
    assert v_err.strip() == r_err.strip()
    assert not (tmp_path / "r").exists()


def test_work_budget_stops_before_simulating_and_says_how_to_raise_it(tmp_path, scen, capsys, monkeypatch):
    monkeypatch.setenv("HETEROSIM_WORK_BUDGET_S", "0.01")  # seconds (heterosim/budget.py; tests/test_budget.py)
    code, _, err = cli(capsys, monkeypatch, tmp_path, "run", scen, "--out", tmp_path / "r", "--quiet")
    one_line(code, err, str(scen), "budget", "HETEROSIM_WORK_BUDGET_S=")
    assert not (tmp_path / "r").exists()
    monkeypatch.setenv("HETEROSIM_WORK_BUDGET_S", "nan")
    code, _, err = cli(capsys, monkeypatch, tmp_path, "validate", scen)
    one_line(code, err, "HETEROSIM_WORK_BUDGET")


def test_runtime_errors_name_the_scenario_file(tmp_path, capsys, monkeypatch):
    # a whole-world collective check in validate: names the scenario, not only the field
    p = tmp_path / "s.yaml"
    p.write_text(textwrap.dedent(GOOD).replace("dgx-h100", "pcie-l40s"))
    code, _, err = cli(capsys, monkeypatch, tmp_path, "validate", p, "--set", "comm.algorithm=nvls")
    one_line(code, err, str(p), "comm.algorithm", "nvls")


# ---------------------------------------------------------------- import-hf

@pytest.mark.parametrize("raw,needle", [
    (b'{"model_type": ["llama"]}', "model_type"),
    (b'{"model_type": {"a": 1}}', "model_type"),
    (b'{"model_type": "llama", "x": "\xff"}', "UTF-8"),
    (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
    (b'{"model_type": "llama", "hidden_size": NaN}', "NaN"),
])
def test_import_hf_bad_files(tmp_path, capsys, monkeypatch, raw, needle):
    f = tmp_path / "config.json"
    f.write_bytes(raw)
    code, _, err = cli(capsys, monkeypatch, tmp_path, "import-hf", f)
    one_line(code, err, "config.json", needle)


def test_import_hf_huge_integer_is_out_of_range(tmp_path, capsys, monkeypatch):
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 10 ** 30, "num_attention_heads": 8,
           "intermediate_size": 64, "vocab_size": 100, "max_position_embeddings": 128}
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    code, _, err = cli(capsys, monkeypatch, tmp_path, "import-hf", f)
    one_line(code, err, "config.json", "hidden_size", "allowed")


def test_measurements_refuse_inf_and_bad_utf8(tmp_path):
    from heterosim.errors import UserError
    from heterosim.hardware.compute import Measurements

    head = "op_class,device,precision,m,n,k,flops,bytes,time_us\n"
    (tmp_path / "inf.csv").write_text(head + "gemm,H100-SXM,bf16,64,64,64,,,inf\n")
    with pytest.raises(UserError, match=r"inf\.csv: line 2\.time_us = 'inf': must be a finite number"):
        Measurements(tmp_path / "inf.csv")
    (tmp_path / "b.csv").write_bytes(head.encode() + b"gemm,H100-SXM,bf16,64,64,64,,,1\xff\n")
    with pytest.raises(UserError, match=r"b\.csv: not UTF-8 text: byte 0xff at line 2"):
        Measurements(tmp_path / "b.csv")


def test_usage_errors_of_every_click_backing_typer_are_caught():
    """typer's vendored click and the real click (brought by the ray extra) raise different classes; the CLI
    must catch the usage errors of whichever is importable here (CI installs ray, so both are)."""
    import importlib

    from heterosim.cli import _click_exceptions

    _, usage, click_exc = _click_exceptions()
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        assert mod.UsageError in usage and mod.ClickException in click_exc, name
