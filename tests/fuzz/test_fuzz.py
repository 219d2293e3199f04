"""A bounded slice of the fuzz corpus (tests/fuzz/fuzzer.py) in CI: every mutated input of the shipped files,
`--set` value and flag must end clean -- exit 2 with one line naming the file or flag, or a valid run --
never a traceback, a hang, a runaway process, an accepted impossible value, or anything left behind.

The full corpus (>= 1,000 inputs) runs by hand: ``PYTHONPATH=$PWD python tests/fuzz/fuzzer.py --cases 1000``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import fuzzer  # noqa: E402

#: Wall-clock bound of the CI slice: it stops generating new cases past this (each case is bounded too).
SLICE_DEADLINE_S = 45


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="the fuzz server forks")
def test_fuzz_slice(tmp_path):
    results = fuzzer.run_corpus(40, seed=2026, root=tmp_path, deadline_s=SLICE_DEADLINE_S)
    assert len(results) >= 10  # a slice that ran nothing proves nothing
    bad = [o for o in results if o.category not in ("clean", "ok")]
    report = "\n".join(f"{o.category}: heterosim {' '.join(o.case.argv)} ({o.case.note}) -> {o.stderr[-300:]}"
                       for o in bad)
    assert not bad, f"{len(bad)} of {len(results)} inputs misbehaved:\n{report}"


def test_the_mutator_is_deterministic():
    ma, mb, m1 = fuzzer.Mutator(5), fuzzer.Mutator(5), fuzzer.Mutator(1)
    a = [ma.case() for _ in range(30)]
    b = [mb.case() for _ in range(30)]
    assert [(c.argv, c.files, c.note) for c in a] == [(c.argv, c.files, c.note) for c in b]
    assert len({c.note for c in a}) > 10  # and it does vary
    kinds = {c.kind for c in (m1.case() for _ in range(200))}
    assert kinds >= {"scenario", "flag", "out", "topology", "hf", "sweep", "csv"}


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="the fuzz server forks")
@pytest.mark.parametrize("setup", ["dir", "file", "fifo"])
def test_every_writer_refuses_what_is_not_ours(tmp_path, setup):
    """Each writer (sweep, compare, traffic, export-chakra, compare-suite, calibrate, run, ...) pointed at a
    user's folder (holding the writer's own file names), file or FIFO: one clean line, nothing touched."""
    import resource

    import heterosim.cli  # noqa: F401  (imports paid once, before the forks)

    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    as_limit = fuzzer._vmsize() + fuzzer.ADDRESS_SPACE_SLACK_BYTES
    mut = fuzzer.Mutator(0)
    bad = []
    for cmd in fuzzer.OUT_WRITERS:
        o = fuzzer.run_case(mut.out_paths(cmd, setup), tmp_path, baseline, as_limit)
        if o.category != "clean":
            bad.append(f"{cmd}: {o.category} (exit {o.code}) {o.stderr[-300:]}")
    assert not bad, "\n".join(bad)
