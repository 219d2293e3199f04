"""Which variants would hold SMs otherwise than the baseline run the program took its chain decisions from.

Under compute contention a local TP collective holds SMs only when it starts a run of the coordinator's alone, and
which ops a run takes can depend on timing (an input of a chained op, a ZeRO all-gather say, may or may not have
ended when the run starts). ``export_program`` takes those decisions from the scenario's own run and records
every timing-dependent link a run could meet as a check on probe times (``heterosim.sim.program.DecisionChecks``);
the engine records the probes' times per variant (``BatchResult.probe_ns``). :func:`flipped` tests each variant:

1. the baseline's own links under the variant's times (vectorized over the batch): all as in the baseline, the
   variant runs the same runs, hence the same holds: exact;
2. where one differs or ties, the coordinator's runs are replayed from every check's outcome under the variant
   (``heterosim.sim.program.replay_holds``): a run structure that differs but holds SMs on the same TP
   collectives is exact too (chains change no time but the holds); holds that differ, or a tie met on the way (the
   coordinator's order of events at one instant decides, which the program does not carry), flag the variant.

A flagged variant's result is not the flow backend's for certain: the caller runs it through the flow backend
(``heterosim whatif``) or leaves it to the normal path (``heterosim sweep``). The earliest decision that differs
is always found: up to the instant it is taken the variant's times are the flow backend's (every hold before it
agrees), so its test reads exact times; later tests may read times already off, which does not matter (the
variant is flagged either way).
"""
from __future__ import annotations

import numpy as np

from heterosim.sim.program import MAX_BACK, replay_holds

_NEVER = 1 << 62
"""A probe time that never came (``engine.INF``)."""


def outcomes(prog, probe_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(taken [B, C], tie [B, C]) of every check under each variant's probe times: a link is taken when every end
    it waits on came strictly before the run's start; ``tie`` where none came after but one came at that instant."""
    ch = prog.checks
    C = ch.count
    start = probe_ns[:, ch.start]  # [B, C]
    seg = np.repeat(np.arange(C), np.diff(ch.wait_ptr))
    w = probe_ns[:, ch.wait]  # [B, W]
    lo = ch.wait_ptr[:-1]  # (every check waits on at least one end)
    after = np.maximum.reduceat((w > start[:, seg]).astype(np.int8), lo, axis=1).astype(bool)
    at = np.maximum.reduceat((w == start[:, seg]).astype(np.int8), lo, axis=1).astype(bool)
    return ~after & ~at, ~after & at


def flipped(prog, res) -> list[str | None]:
    """Per variant of the batch result ``res`` (``BatchResult``): None where its local TP collectives hold SMs as the
    program's do (the module docstring), else one line saying which decision goes the other way."""
    ch = getattr(prog, "checks", None)
    probe_ns = res.probe_ns
    B = len(res.iteration_time_ns)
    if ch is None:
        return [None] * B
    short = [lane["lane"] for lane in ch.lanes if not lane["complete"]]
    if short:  # (a chain too long to search back along: its links are not all checks)
        return [f"the chain decisions of lane(s) {short} are not all checked (a chain longer than "
                f"{MAX_BACK} ops)"] * B
    if probe_ns is None or not ch.count:
        return [None] * B
    taken, tie = outcomes(prog, probe_ns)
    never = (probe_ns >= _NEVER).any(axis=1)
    bad = tie[:, ch.base] | (taken[:, ch.base] != ch.taken[None, :])
    out: list[str | None] = []
    for i in range(probe_ns.shape[0]):
        if never[i]:
            out.append("a probe of the chain decisions did not end (the variant stalled)")
            continue
        js = np.nonzero(bad[i])[0]
        out.append(None if not len(js) else _replay(ch, taken[i], tie[i], int(ch.base[js[0]]), len(js)))
    return out


def _replay(ch, taken: np.ndarray, tie: np.ndarray, first: int, n_bad: int) -> str | None:
    """Step 2 for one variant whose baseline links do not all agree (``first``: the first that does not)."""
    head = f"{n_bad} of the baseline run's {len(ch.base)} timing-dependent chain links go otherwise (first: " \
           f"{ch.labels[first]})"
    def outcome(c: int):
        return None if tie[c] else bool(taken[c])

    for lane in ch.lanes:
        holds, c = replay_holds(lane, outcome)
        if holds is None:
            return f"{head}; a link ties with its run's start (the order of events at one instant decides): " \
                   f"{ch.labels[c]}" if c >= 0 else f"{head}; lane {lane['lane']}: a link without a check met"
        if holds != lane["holds"]:
            o = min(holds ^ lane["holds"])
            return f"{head}; lane {lane['lane']}: {lane['names'][o]} (op {o}) would " \
                   f"{'hold' if o in holds else 'not hold'} SMs under this variant's times (the program: " \
                   f"{'holds' if o in lane['holds'] else 'does not hold'})"
    return None

