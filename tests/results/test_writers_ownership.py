"""Every writer of the CLI, pointed at a user's own file or folder: one line, exit 2, and nothing touched.

A careful user keeps their thesis in the folder they point HeteroSim at. Each writer (run, compile, sweep,
compare, compare-suite, traffic, plan --write / --json, export-chakra, cluster runs, calibrate --out,
collective --png) may create a new file or folder, or replace one that HeteroSim itself wrote, and nothing
else. Each case below builds a user's folder or file holding the very names that writer would write (its
``sweep.json``, ``summary.json``...), runs the real CLI and compares the tree, byte for byte and mtime for
mtime, before and after.
"""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from cli_helpers import cli_subprocess, one_line
from tiny_scenario import TINY_YAML

REPO = Path(__file__).resolve().parents[2]


cli = cli_subprocess


def snapshot(root: Path) -> dict:
    """Every path under ``root`` (itself included) with its bytes and mtime; links not followed."""
    snap = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames, ""]:
            p = Path(dirpath) / name
            st = p.lstat()
            data = p.read_bytes() if p.is_file() and not p.is_symlink() else None
            snap[str(p.relative_to(root.parent))] = (st.st_mode, st.st_mtime_ns, data)
    return snap


def refused_untouched(proc, before: dict, root: Path, *needles):
    one_line(proc.returncode, proc.stderr, *needles, out=proc.stdout)
    assert snapshot(root) == before, "the user's files were touched"
    strays = [p.name for p in root.parent.iterdir() if p.name.startswith(f".{root.name}.")]
    assert not strays, strays


def users_folder(tmp_path: Path, *names: str) -> Path:
    """A folder of the user's: their thesis and files named like the writer's own outputs."""
    d = tmp_path / "mine"
    d.mkdir()
    (d / "thesis.tex").write_text("\\documentclass{article} % years of work\n")
    for n in names:
        (d / n).parent.mkdir(parents=True, exist_ok=True)
        (d / n).write_text('{"mine": true}\n')
    return d


@pytest.fixture
def tiny(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text(textwrap.dedent(TINY_YAML))
    return p


def test_sweep_never_resumes_a_folder_it_did_not_stamp(tmp_path, tiny):
    """The reported bug: a user's sweep.json made the folder look like a sweep to resume."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"scenario: {tiny}\nparameters:\n  training.global_batch_size: [8, 16]\n")
    mine = users_folder(tmp_path, "sweep.json")
    before = snapshot(mine)
    refused_untouched(cli("sweep", sweep, "--out", mine, "-q"), before, mine, str(mine), "--out")


def test_sweep_refuses_a_users_folder_before_checking_resume_settings(tmp_path, tiny):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"scenario: {tiny}\nparameters:\n  training.global_batch_size: [8, 16]\n")
    mine = users_folder(tmp_path)
    (mine / "sweep.json").write_text('{"overrides": {"hardware.measurements": "none"}}')
    before = snapshot(mine)
    refused_untouched(cli("sweep", sweep, "--out", mine, "-q"), before, mine, "--out", "stamp")


@pytest.mark.parametrize("command", [
    ["run", "{tiny}", "--out", "{mine}"],
    ["compile", "{tiny}", "--out", "{mine}"],
    ["export-chakra", "{tiny}", "--out", "{mine}"],
    ["compare", "{tiny}", "--backend", "flow", "--cc", "dcqcn,none", "--out", "{mine}"],
    ["run", str(REPO / "scenarios/multi-job/two-gpt-packed.yaml"), "--out", "{mine}"],
    ["traffic", str(REPO / "scenarios/traffic/dcqcn-incast.yaml"), "--backend", "flow", "--out", "{mine}"],
    ["compare-suite", "{suite}", "--out", "{mine}", "--no-naive", "--jobs", "1"],
], ids=["run", "compile", "export-chakra", "compare", "cluster-run", "traffic", "compare-suite"])
def test_folder_writers_refuse_a_users_folder(tmp_path, tiny, command):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "a.yaml").write_text(textwrap.dedent(TINY_YAML))
    mine = users_folder(tmp_path, "summary.json", "suite.csv", "comparison.csv", "ir.json", "compare.csv")
    before = snapshot(mine)
    argv = [a.format(tiny=tiny, mine=mine, suite=suite) for a in command]
    refused_untouched(cli(*argv), before, mine, str(mine))


def test_plan_write_and_json_refuse_a_users_files(tmp_path, tiny):
    mine = users_folder(tmp_path, "plan.yaml", "plan.json")
    (mine / "plan.yaml").write_text("# my own scenario\nname: x\n")
    (mine / "plan.json").write_text('{\n  "candidates": "my own notes"}\n')
    before = snapshot(mine)
    refused_untouched(cli("plan", tiny, "--simulate", "0", "--write", mine / "plan.yaml"), before, mine,
                      "--write", "plan.yaml")
    refused_untouched(cli("plan", tiny, "--simulate", "0", "--json", mine / "plan.json"), before, mine,
                      "--json", "plan.json")


def test_calibrate_out_refuses_a_users_yaml(tmp_path):
    mine = users_folder(tmp_path)
    (mine / "eff.yaml").write_text("families: {mine: 1}\n")
    before = snapshot(mine)
    tables = REPO / "heterosim/hardware/measured/h100-sxm"
    if not tables.is_dir():
        from heterosim.hardware.measured import BUILTIN

        tables = BUILTIN["H100-SXM"]
    refused_untouched(cli("calibrate", tables, "--out", mine / "eff.yaml"), before, mine, "--out", "eff.yaml")


def test_calibrate_out_replaces_what_calibrate_wrote(tmp_path):
    from heterosim.hardware.measured import BUILTIN

    out = tmp_path / "eff.yaml"
    first = cli("calibrate", BUILTIN["H100-SXM"], "--out", out)
    assert first.returncode == 0, first.stderr
    again = cli("calibrate", BUILTIN["H100-SXM"], "--out", out)
    assert again.returncode == 0, again.stderr


def test_collective_png_refuses_a_png_heterosim_did_not_write(tmp_path):
    """Any PNG used to count as ours (the magic bytes alone); a user's figure is not."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mine = users_folder(tmp_path)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    fig.savefig(mine / "figure3.png")  # the user's own plot, made with matplotlib like ours
    plt.close(fig)
    before = snapshot(mine)
    topo = REPO / "topologies/dgx-h100-leaf-spine.yaml"
    if not topo.exists():
        topo = next((REPO / "topologies").glob("*.yaml"))
    refused_untouched(cli("collective", "--topology", topo, "--size", "1MiB", "--png", mine / "figure3.png"),
                      before, mine, "--png", "figure3.png")


def test_collective_png_replaces_its_own_curve(tmp_path):
    topo = REPO / "topologies/dgx-h100-leaf-spine.yaml"
    if not topo.exists():
        topo = next((REPO / "topologies").glob("*.yaml"))
    out = tmp_path / "curve.png"
    for _ in range(2):
        proc = cli("collective", "--topology", topo, "--size", "1MiB", "--png", out)
        assert proc.returncode == 0, proc.stderr
    assert out.read_bytes().startswith(b"\x89PNG")
