"""Plots drawn in a forked child (heterosim/forking.py, ForkedTask): the same files as drawn inline,
the child's errors raised in the caller, and nothing left behind when either side fails."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from heterosim import api
from heterosim.errors import UserError
from heterosim import forking
from heterosim.forking import ForkedTask

ROOT = Path(__file__).resolve().parents[1]
forks = pytest.mark.skipif(not forking._fork_pays(), reason="ForkedTask runs inline here (not Linux or one CPU)")


@pytest.fixture(scope="module")
def result():
    return api.run(ROOT / "scenarios" / "quickstart.yaml", overrides=["training.global_batch_size=16"])


def _pid_to(path: Path) -> None:
    # Written aside and renamed: a reader polling for the file never sees it empty (CI read '' once).
    part = path.with_name(path.name + ".part")
    part.write_text(str(os.getpid()))
    os.replace(part, path)


@forks
def test_runs_in_another_process_and_joins(tmp_path):
    task = ForkedTask(_pid_to, tmp_path / "pid")
    task.join()
    assert int((tmp_path / "pid").read_text()) != os.getpid()


def test_inline_while_another_thread_runs(tmp_path):
    import threading

    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        ForkedTask(_pid_to, tmp_path / "pid").join()
    finally:
        stop.set()
        t.join()
    assert int((tmp_path / "pid").read_text()) == os.getpid()


def test_inline_when_the_fork_fails(tmp_path, monkeypatch):
    import errno

    def no_fork():
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(forking, "_fork_pays", lambda: True)
    monkeypatch.setattr(os, "fork", no_fork)
    before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    ForkedTask(_pid_to, tmp_path / "pid").join()
    assert int((tmp_path / "pid").read_text()) == os.getpid()
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) == before  # the pipe was closed


def test_inline_where_forking_does_not_pay(tmp_path, monkeypatch):
    monkeypatch.setattr(forking, "_fork_pays", lambda: False)
    ForkedTask(_pid_to, tmp_path / "pid").join()
    assert int((tmp_path / "pid").read_text()) == os.getpid()


def _kill_self() -> None:
    os.kill(os.getpid(), 9)  # (as the kernel's out-of-memory killer would)


def _user_error() -> None:
    raise UserError("cannot draw", field="output.plots", value=True)


@forks
def test_child_errors_are_raised_by_join():
    task = ForkedTask(_user_error)
    with pytest.raises(UserError) as err:
        task.join()
    assert str(err.value) == "output.plots = True: cannot draw"  # (what the CLI prints; the child's traceback is a note)


@forks
def test_a_child_that_dies_without_a_word_is_an_error():
    task = ForkedTask(os._exit, 3)
    with pytest.raises(UserError, match="ended with status 3"):  # (one line from the CLI, exit 2)
        task.join()
    task = ForkedTask(_kill_self)
    with pytest.raises(UserError, match=r"killed by signal 9 \(out of memory\?\)"):
        task.join()


@forks
def test_same_files_as_drawn_inline(result, tmp_path, monkeypatch):
    api.write_results(result, tmp_path / "forked")
    monkeypatch.setattr(forking, "_fork_pays", lambda: False)
    api.write_results(result, tmp_path / "inline")
    names = sorted(p.name for p in (tmp_path / "inline").iterdir())
    assert "timeline.png" in names and "breakdown.png" in names
    assert sorted(p.name for p in (tmp_path / "forked").iterdir()) == names
    for n in names:
        if n != "summary.json":  # (it holds the run's own wall time)
            assert (tmp_path / "forked" / n).read_bytes() == (tmp_path / "inline" / n).read_bytes(), n


def test_parent_failure_stops_the_child_and_leaves_nothing(result, tmp_path, monkeypatch):
    """The child is still drawing (it waits on a pipe that never gets a byte) when the parent's trace fails:
    it is killed and reaped before the temp dir goes, so nothing appears next to the output afterwards."""
    from heterosim.results import plots, trace

    if not forking._fork_pays():
        pytest.skip("inline: the stuck plot would block this process")
    r, w = os.pipe()

    def stuck(*a, **k):
        _pid_to(tmp_path / "pid")
        os.read(r, 1)  # blocks in the child: the parent never writes

    def boom(*a, **k):
        deadline = time.monotonic() + 60
        while not (tmp_path / "pid").exists() and time.monotonic() < deadline:  # (the child is drawing)
            time.sleep(0.01)
        raise RuntimeError("disk full")

    monkeypatch.setattr(plots, "plot_timeline", stuck)
    monkeypatch.setattr(trace, "write_trace", boom)
    (tmp_path / "d").mkdir()
    with pytest.raises(RuntimeError, match="disk full"):
        api.write_results(result, tmp_path / "d" / "out")
    os.close(r)
    os.close(w)
    assert list((tmp_path / "d").iterdir()) == []
    with pytest.raises(ChildProcessError):
        os.waitpid(int((tmp_path / "pid").read_text()), os.WNOHANG)  # reaped: no such child any more


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
