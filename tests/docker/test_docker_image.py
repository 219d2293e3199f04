"""Build the image and run the quickstart in a container (needs a Docker engine; minutes).

Runs when `docker info` answers; with HETEROSIM_DOCKER_TEST=1 it starts a private dockerd
(docker/dockerd-local.sh) and, where no registry answers, makes the base image locally
(docker/make-local-base.sh). Stops only the dockerd it started.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BASE = "python:3.11-slim-bookworm"
TAG = os.environ.get("HETEROSIM_DOCKER_TAG", "heterosim:latest")


def _sh(cmd, env, timeout, check=True, **kw):
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT, **kw)
    if check and res.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} -> {res.returncode}\n{(res.stdout + res.stderr)[-3000:]}")
    return res


def _answers(docker: str, env) -> bool:
    try:
        return subprocess.run([docker, "info"], env=env, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _buildkit_cli(env) -> str:
    """A docker CLI that can build with BuildKit: one with buildx, or a pre-23 one with it built in."""
    candidates = [os.environ.get("HETEROSIM_DOCKER_CLI"), shutil.which("docker"), "/usr/bin/docker"]
    for c in [c for c in candidates if c and Path(c).exists()]:
        if subprocess.run([c, "buildx", "version"], env=env, capture_output=True).returncode == 0:
            return c
        ver = subprocess.run([c, "version", "--format", "{{.Client.Version}}"], env=env, capture_output=True,
                             text=True).stdout.strip()
        if ver and ver.split(".")[0].isdigit() and int(ver.split(".")[0]) < 23:
            return c
    pytest.skip("no docker CLI with BuildKit (install buildx or Debian's docker.io)")


@pytest.fixture(scope="module")
def docker_env(tmp_path_factory):
    env = dict(os.environ)
    docker = shutil.which("docker")
    if docker and _answers(docker, env):
        yield env
        return
    if os.environ.get("HETEROSIM_DOCKER_TEST") != "1":
        pytest.skip("no Docker engine answers `docker info` (HETEROSIM_DOCKER_TEST=1 starts one)")
    if not shutil.which("dockerd"):
        pytest.skip("dockerd not installed (apt-get install -y docker.io)")
    d = tmp_path_factory.mktemp("dockerd")
    res = _sh(["bash", "docker/dockerd-local.sh", "start", str(d)], env, 120)
    env["DOCKER_HOST"] = res.stdout.strip().split("=", 1)[1]
    try:
        yield env
    finally:
        stopped = subprocess.run(["bash", "docker/dockerd-local.sh", "stop", str(d)], env=env, timeout=60,
                                 cwd=ROOT).returncode == 0
        if stopped:  # images and build cache: gigabytes
            shutil.rmtree(d / "root", ignore_errors=True)


def test_image_builds_and_runs_quickstart(docker_env, tmp_path):
    env = docker_env
    docker = _buildkit_cli(env)
    if subprocess.run([docker, "image", "inspect", BASE], env=env, capture_output=True).returncode != 0:
        pulled = subprocess.run([docker, "pull", BASE], env=env, capture_output=True, timeout=300).returncode == 0
        if not pulled:
            _sh(["bash", "docker/make-local-base.sh"], env, 900)
    bundle = tmp_path / "extra-ca.crt"
    certs = sorted(Path("/usr/local/share/ca-certificates").glob("*.crt"))
    bundle.write_text("".join(c.read_text() for c in certs))
    t0 = time.monotonic()
    _sh([docker, "build", "--secret", f"id=extra_ca,src={bundle}", "-f", "docker/Dockerfile", "-t", TAG, "."],
        {**env, "DOCKER_BUILDKIT": "1"}, 3600)
    build_s = time.monotonic() - t0
    results = tmp_path / "results"
    results.mkdir()
    user = f"{os.getuid()}:{os.getgid()}"
    # the prebuilt ns-3 module is found, not recompiled (same compiler, same paths)
    res = _sh([docker, "run", "--rm", "--user", user, "--entrypoint", "python", TAG, "-c",
               "import time; t=time.monotonic(); from netbackend.ns3.build import ensure_built; "
               "b=ensure_built(); print(b.library.exists(), round(time.monotonic()-t, 2))"], env, 300)
    ok, secs = res.stdout.split()[-2:]
    assert ok == "True" and float(secs) < 5, res.stdout
    _sh([docker, "run", "--rm", "--user", user, "-v", f"{results}:/results", TAG], env, 900)
    summary = json.loads((results / "quickstart" / "summary.json").read_text())
    assert summary["iteration_time_s"] > 0 and summary["gpus"] == 16
    print(f"image build {build_s:.0f} s")
