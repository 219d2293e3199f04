"""heterosim.pipeline._gc_paused: a phase's objects skip the young collections, and its garbage cycles are
still freed by the full collection it runs every _FULL_EVERY phases."""
from __future__ import annotations

import gc
import weakref

from heterosim import pipeline


class _Node:
    def __init__(self):
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_phase_objects_skip_young_collections_and_cycles_are_freed_within_a_round(monkeypatch):
    # the round starts here: phases run by earlier tests must not put this test's first phase on a round's
    # full collection (which would free the cycle at once; the test failed in a full run that way)
    monkeypatch.setattr(pipeline, "_phases", 0)
    assert gc.isenabled()
    gc.collect()
    gens = []
    cb = lambda phase, info: gens.append(info["generation"]) if phase == "start" else None  # noqa: E731
    gc.callbacks.append(cb)
    try:
        with pipeline._gc_paused():
            keep = [[i] for i in range(50_000)]  # what a phase builds and keeps
            dead = weakref.ref(_Node())  # and a cycle it drops
        assert gc.isenabled()
        assert dead() is not None  # not collected yet: it waits in the oldest generation
        # the kept objects are in the oldest generation already, so no young collection walks them
        oldest = {id(o) for o in gc.get_objects(generation=2)}
        assert id(keep[0]) in oldest and id(keep[-1]) in oldest
        before = len(gens)
        junk = [[i] for i in range(5_000)]  # past the young threshold: young collections only
        assert gens[before:] and max(gens[before:]) < 2
        # within a round of phases the full collection frees the cycle
        for _ in range(pipeline._FULL_EVERY):
            with pipeline._gc_paused():
                pass
        assert dead() is None
        assert 2 in gens
        assert len(keep) == 50_000 and len(junk) == 5_000
    finally:
        gc.callbacks.remove(cb)


def test_objects_frozen_by_the_process_stay_frozen():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with pipeline._gc_paused():
            pass
        assert gc.get_freeze_count() == frozen  # not unfrozen on the process's behalf
        assert gc.isenabled()
    finally:
        gc.unfreeze()
