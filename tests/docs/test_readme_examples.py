"""Every example in README.md runs as written, from a fresh folder, and exits 0.

The README is the manual a newcomer copies from, so its examples are extracted from the file itself,
not restated here:

- a ```bash block is one test: its lines run in order, in one fresh folder holding copies of the
  repository's ``scenarios/`` and ``topologies/`` (the examples' paths are relative to the repository
  root), with the interpreter's ``bin/`` first on PATH so ``heterosim`` is the installed console script;
- a ```yaml block whose first line is ``# file: NAME`` is written to NAME in that folder first (the Chakra
  replay scenario);
- a ```python block runs with this interpreter in such a folder;
- a ```console block's ``$ heterosim ...`` lines run too and must print the lines shown under them; a shown
  ``error:`` line means exit code 2 (the project's one-line error), otherwise 0.

Lines that are not ``heterosim`` commands are recognised, never silently dropped: the two set-up commands
(the test command must be the last command of ``.ci/run``), the docs-site build (tests/docs/test_docs_site.py
builds it) and the Docker block, which runs where a Docker engine answers and the image is already built
(tests/docker/test_docker_image.py builds it and runs the same services) and is skipped otherwise. Any other
line fails the test, so a new example cannot escape it. Commands that need the packet-level backend are
skipped where the ns3 wheel (cppyy) is missing, as the backend's own tests are.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CI_RUN = ROOT / ".ci" / "run"
TIMEOUT_S = 600  # a hang guard per command, not a speed check (speed lives in benchmarks/)
FENCE = re.compile(r"^```(\w*)\s*$")
FILE_MARK = re.compile(r"^#\s*file:\s*(\S+)\s*$")
HAS_NS3 = importlib.util.find_spec("cppyy") is not None


@dataclass
class Block:
    lang: str
    line: int  # 1-based line of the opening fence in README.md
    lines: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.lang}@L{self.line}"


def readme_blocks(text: str) -> list[Block]:
    """Fenced code blocks of a markdown text, in order."""
    blocks, cur = [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if cur is None and m:
            cur = Block(m.group(1), n)
        elif cur is not None and line.strip() == "```":
            blocks.append(cur)
            cur = None
        elif cur is not None:
            cur.lines.append(line)
    assert cur is None, f"README.md: code block opened at line {cur.line} is never closed"
    return blocks


def commands(block: Block) -> list[str]:
    """A shell block's commands: one per line, backslash continuations joined, blank lines dropped."""
    out, acc = [], ""
    for line in block.lines:
        if line.rstrip().endswith("\\"):
            acc += line.rstrip()[:-1] + " "
            continue
        full = (acc + line).strip()
        acc = ""
        if full and not full.startswith("#"):
            out.append(full)
    return out


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))
SHELL = [b for b in BLOCKS if b.lang in ("bash", "sh", "shell")]
FILES = {FILE_MARK.match(b.lines[0]).group(1): "\n".join(b.lines[1:]) + "\n"
         for b in BLOCKS if b.lang == "yaml" and b.lines and FILE_MARK.match(b.lines[0])}


def ci_test_command() -> str:
    """The last command line of .ci/run: what CI runs, which the README must show verbatim."""
    lines = [ln.strip() for ln in CI_RUN.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    return lines[-1]


def is_setup(cmd: str) -> bool:
    return cmd.startswith("python3 -m venv .venv && .venv/bin/pip install ")


def is_docs_build(cmd: str) -> bool:
    return cmd.startswith(".venv/bin/pip install -e '.[docs]'") and "mkdocs build" in cmd


def is_docker_block(block: Block) -> bool:
    return any(c.startswith("docker ") for c in commands(block))


def needs_ns3(cmd: str) -> bool:
    words = shlex.split(cmd, comments=True)
    return ("ns3" in words and "--backend" in words) or (len(words) > 1 and words[1] in ("compare", "traffic"))


@pytest.fixture
def workdir(tmp_path):
    """A fresh folder laid out like the repository root for the examples: scenarios/, topologies/, the
    README's `# file:` YAML blocks, and a PATH whose `heterosim` is this interpreter's."""
    for name in ("scenarios", "topologies"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    bindir = Path(sys.executable).parent
    if not (bindir / "heterosim").exists():  # not installed as a console script: a shim with the same effect
        shim = tmp_path / ".bin"
        shim.mkdir()
        (shim / "heterosim").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m heterosim "$@"\n')
        (shim / "heterosim").chmod(0o755)
        bindir = shim
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
           "MPLBACKEND": "Agg", "COLUMNS": "120"}
    return tmp_path, env


def run_line(cmd: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)


def test_readme_has_the_examples():
    """The extraction finds what the README promises: the two set-up commands and one example per job."""
    cmds = [c for b in SHELL for c in commands(b)]
    assert sum(map(is_setup, cmds)) == 2, cmds
    for sub in ("run", "validate", "compare", "traffic", "plan", "sweep", "export-chakra"):
        assert any(c.startswith(f"heterosim {sub} ") for c in cmds), f"no `heterosim {sub}` example in README.md"
    assert any("kind: cluster" in (ROOT / c.split()[2]).read_text() for c in cmds
               if c.startswith("heterosim run scenarios/multi-job/")), "no multi-job example"
    assert any(b.lang == "python" for b in BLOCKS) and any(b.lang == "console" for b in BLOCKS)
    assert any(map(is_docker_block, SHELL))


def test_readme_test_command_is_what_ci_runs():
    """The README's second set-up command is, character for character, the command .ci/run runs."""
    setup = [c for b in SHELL for c in commands(b) if is_setup(c)]
    assert ci_test_command() in setup, f".ci/run runs {ci_test_command()!r}; README.md shows {setup!r}"
    install = [c for c in setup if c != ci_test_command()]
    assert install and install[0].endswith(".venv/bin/heterosim run scenarios/quickstart.yaml"), install


@pytest.mark.parametrize("block", SHELL, ids=[b.id for b in SHELL])
def test_readme_shell_block(block, workdir):
    cwd, env = workdir
    cmds = commands(block)
    if is_docker_block(block):
        _docker(cmds, env)
        return
    ran, skipped = [], []
    for cmd in cmds:
        if is_setup(cmd) or is_docs_build(cmd):
            continue  # set-up: checked against .ci/run above; docs build: tests/docs/test_docs_site.py
        assert cmd.startswith("heterosim "), (
            f"README.md line {block.line}: `{cmd}` is neither a heterosim example nor a known set-up line: "
            f"teach tests/docs/test_readme_examples.py what it is")
        if needs_ns3(cmd) and not HAS_NS3:
            skipped.append(cmd)
            continue
        res = run_line(cmd, cwd, env)
        assert res.returncode == 0, (f"README.md block at line {block.line}: `{cmd}` exited {res.returncode}\n"
                                     f"{(res.stdout + res.stderr)[-3000:]}")
        ran.append(cmd)
    if skipped and not ran:
        pytest.skip(f"needs the ns3 wheel (cppyy): {skipped}")


def _docker(cmds: list[str], env: dict) -> None:
    if not shutil.which("docker"):
        pytest.skip("no docker client; tests/docker/test_docker_image.py runs these services where an engine is")
    try:
        answers = subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        answers = False
    if not answers:
        pytest.skip("no Docker engine answers; tests/docker/test_docker_image.py starts one in CI and runs these")
    built = subprocess.run(["docker", "image", "inspect", "heterosim:latest"], capture_output=True).returncode == 0
    if not built:
        pytest.skip("heterosim:latest is not built (a first build takes many minutes); "
                    "tests/docker/test_docker_image.py builds it and runs the same services")
    for cmd in cmds:
        assert cmd.startswith(("docker ", "mkdir ")), f"README.md Docker block: unexpected line `{cmd}`"
        res = run_line(cmd, ROOT, env)  # compose paths are relative to the repository root
        assert res.returncode == 0, f"`{cmd}` exited {res.returncode}\n{(res.stdout + res.stderr)[-3000:]}"


PY = [b for b in BLOCKS if b.lang == "python"]


@pytest.mark.parametrize("block", PY, ids=[b.id for b in PY])
def test_readme_python_block(block, workdir):
    cwd, env = workdir
    res = subprocess.run([sys.executable, "-c", "\n".join(block.lines)], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, f"README.md python block at line {block.line}:\n{(res.stdout + res.stderr)[-3000:]}"


CONSOLE = [b for b in BLOCKS if b.lang == "console"]


def console_examples(block: Block) -> list[tuple[str, list[str]]]:
    """`$ cmd` lines with the output lines shown under each."""
    out = []
    for line in block.lines:
        if line.startswith("$ "):
            out.append((line[2:].strip(), []))
        elif out and line.strip():
            out[-1][1].append(line.strip())
    return out


@pytest.mark.parametrize("block", CONSOLE, ids=[b.id for b in CONSOLE])
def test_readme_console_block(block, workdir):
    cwd, env = workdir
    examples = console_examples(block)
    assert examples, f"README.md console block at line {block.line} shows no `$ ` command"
    for cmd, shown in examples:
        assert cmd.startswith("heterosim "), cmd
        res = run_line(cmd, cwd, env)
        want = 2 if any(s.startswith("error:") for s in shown) else 0
        assert res.returncode == want, f"`{cmd}` exited {res.returncode}, README shows exit {want}\n{res.stderr}"
        printed = [ln.strip() for ln in (res.stdout + res.stderr).splitlines()]
        for s in shown:
            assert s in printed, f"`{cmd}` did not print the README's line {s!r}; it printed:\n{res.stdout}{res.stderr}"
        if want == 2:
            assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
