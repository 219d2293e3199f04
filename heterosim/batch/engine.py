"""The batched engine: B variants of one :class:`~heterosim.sim.program.Program` advanced together.

Every experiment is a row of flat, fixed-shape columns: node wait counters ``[B, N]``, a pool of pending events
``[B, KE]`` (a node's end, a flow's post, a queued flow handed its connection), a pool of flows on the wire
``[B, KF]``, and connection state ``[B, C]``. Each round every experiment advances to its own next event:

* if its next flow drain comes first (``t_drain <= t_event``), the flows draining within ``1e-3`` ns of it
  leave the wire (their end is queued at ``max(ceil(drain - 1e-6), post) + latency``, their connection freed);
* else every event due at ``t_event`` is processed: a node's end releases its successors by integer counters (a
  released JOIN ends at once, a DELAY after its duration, a FLOW is posted after its ``pre_ns``); a posted flow
  takes its connection in posting order (FIFO), or waits for it; a flow that starts enters the wire.
* where the flows on the wire changed, their rates are re-filled by batched progressive filling (max-min fair,
  the flow backend's definition: ``netbackend/flow.py``); a flow's remaining bytes are brought up to date only
  where its rate changed, and it drains at ``t + remaining / rate``: the flow backend's arithmetic.

The filling freezes, in each pass, the flows of every *locally* tightest link (a link whose share is the least
on every link its unfrozen flows cross): they would freeze at that share in the sequential order too (shares
only rise as flows freeze elsewhere, and none of their links is tighter), so the result is the max-min fair
allocation, in as many passes as the allocation has levels of nested bottlenecks.

One loop body (:func:`_round`) runs on two drivers through a small set of array primitives (:class:`_Ops`):
NumPy (the reference, a Python loop) and JAX (``jit`` of a ``lax.while_loop``, float64; XLA on the CPU here,
on a GPU where there is one).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from heterosim.sim.program import DELAY, FLOW, MAX_MEMBERS, Program

INF = np.int64(1 << 62)
"""An event time that never comes (empty slot, queued flow)."""
DONE, POST, START, QUEUED = 0, 1, 2, 3
"""Event kinds: a node ends; a flow is posted; a queued flow is handed its connection; a flow waits for it."""
DRAIN_BATCH_NS = 1e-3
"""Flows draining within this of the first drain leave together (``netbackend/flow.py`` ``_DRAIN_BATCH_NS``)."""
MDUE = 8
"""Due events one round processes per experiment (the others wait for the next round, at the same instant)."""
OVERFLOW_EVENTS, OVERFLOW_FLOWS, STALLED, OVERFLOW_COMPUTE = 1, 2, 4, 8
"""Row flags: the event or flow pool was too small (the driver reruns with larger pools), the run stalled, or more
compute nodes were started or re-timed in one round than the compute slots (the driver reruns with more)."""
_OVERFLOW = OVERFLOW_EVENTS | OVERFLOW_FLOWS | OVERFLOW_COMPUTE


@dataclass
class Params:
    """Per-experiment inputs (B rows): what a variant may change without changing the program."""

    cap: np.ndarray
    """float64[B, L+1]: link capacities in bytes/ns (NIC caps that do not bind, and the dummy: inf)."""
    lane_slow: np.ndarray
    """float64[B, lanes]: compute-time multiplier of each lane (its slowest GPU's slowdown)."""
    hop_ns: np.ndarray
    """int64[B]: network per-hop (switch) latency."""
    path_links: np.ndarray
    """int32[B, NP, P]: each path's links (NIC caps included; they depend on the ECMP seed)."""
    path_lat: np.ndarray
    """int32[B, NP, P]: each path's real links after the first (store-and-forward latency)."""
    path_prop: np.ndarray
    """int64[B, NP]: propagation delay of each path."""
    path_hops: np.ndarray
    """int64[B, NP]: switches on each (network) path."""

    @property
    def batch(self) -> int:
        return self.cap.shape[0]


@dataclass
class BatchResult:
    iteration_time_ns: np.ndarray
    """int64[B]."""
    flags: np.ndarray
    """int32[B]: 0, or STALLED."""
    rounds: int
    """Rounds the batch took (the slowest experiment's event count)."""
    wall_s: float
    compile_s: float = 0.0
    pools: tuple[int, int] = (0, 0)
    """(KE, KF): event and flow pool sizes per experiment."""
    probe_ns: np.ndarray | None = None
    """int64[B, W]: when each probe node of the program ended (``Program.probe``; None without probes): the times
    :func:`heterosim.batch.decisions.flipped` tests the baseline's chain decisions on."""


class _Ops:
    """The array primitives the loop body uses, for NumPy (in place) or JAX (functional)."""

    def __init__(self, xp, jax_lax=None):
        self.xp = xp
        self.lax = jax_lax
        self.is_jax = jax_lax is not None

    def _flat(self, arr, rows, cols, vals, mask):
        """(flat index, values) for a scatter into ``arr`` (2-D): XLA on the CPU scatters into a flat array
        ~13x faster than with 2-D indices (measured); masked entries point past the end and are dropped."""
        xp = self.xp
        rows, cols, vals, mask = xp.broadcast_arrays(rows, cols, vals, mask)
        idx = xp.where(mask, rows * arr.shape[1] + cols, arr.size)
        return idx.reshape(-1), vals.reshape(-1)

    def _scatter(self, arr, rows, cols, vals, mask, op: str):
        """arr[rows, cols] (op)= vals where mask: ``add`` and ``min`` accumulate repeated cells; ``set`` needs the
        masked entries to name distinct cells."""
        if self.is_jax:
            idx, v = self._flat(arr, rows, cols, vals, mask)
            at = arr.reshape(-1).at[idx]
            return getattr(at, op)(v, mode="drop").reshape(arr.shape)
        rows, cols, vals, mask = np.broadcast_arrays(rows, cols, vals, mask)
        cells = (rows[mask], cols[mask])
        if op == "set":
            arr[cells] = vals[mask]
        else:
            (np.add if op == "add" else np.minimum).at(arr, cells, vals[mask])
        return arr

    def scatter_add(self, arr, rows, cols, vals, mask):
        return self._scatter(arr, rows, cols, vals, mask, "add")

    def scatter_min(self, arr, rows, cols, vals, mask):
        return self._scatter(arr, rows, cols, vals, mask, "min")

    def scatter_set(self, arr, rows, cols, vals, mask):
        """Masked entries must name distinct cells."""
        return self._scatter(arr, rows, cols, vals, mask, "set")

    def cond(self, pred, true_fn, false_fn, *operands):
        """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)`` (JAX: ``lax.cond``, one branch runs)."""
        if self.is_jax:
            return self.lax.cond(pred, true_fn, false_fn, *operands)
        return true_fn(*operands) if bool(pred) else false_fn(*operands)

    def while_loop(self, cond, body, state):
        if self.is_jax:
            return self.lax.while_loop(cond, body, state)
        while bool(cond(state)):
            state = body(state)
        return state


def _first(ops, xp, mask, m):
    """Column indices [B, m] of the first ``m`` True entries of each row of ``mask`` [B, K] (0 past the last),
    and whether each exists: a cumulative count and a scatter (XLA sorts on the CPU cost more)."""
    b, k = mask.shape
    rank = xp.cumsum(mask.astype(np.int32), axis=1) - 1
    rows = xp.arange(b)[:, None]
    cols = xp.broadcast_to(xp.arange(k, dtype=np.int32)[None, :], (b, k))
    inv = ops.scatter_set(xp.zeros((b, m), np.int32), rows, xp.clip(rank, 0, m - 1), cols, mask & (rank < m))
    have = xp.arange(m)[None, :] < mask.sum(axis=1)[:, None]
    return inv, have


def _alloc(ops, xp, occupied, want):
    """Slots for the ``want`` [B, M] candidates among the free ones of ``occupied`` [B, K]: (slot [B, M], fits [B])."""
    b, k = occupied.shape
    free_pos, _ = _first(ops, xp, ~occupied, k)
    nfree = k - occupied.sum(axis=1)
    rank = xp.cumsum(want.astype(np.int32), axis=1) - 1
    pos = xp.take_along_axis(free_pos, xp.clip(rank, 0, k - 1), axis=1)
    fits = want.sum(axis=1) <= nfree
    return pos, fits


def _round(ops: _Ops, P: dict, prm: dict, s: dict) -> dict:
    """One round for every experiment (module docstring). ``P``: program arrays, ``prm``: parameters, ``s``: state.

    (Over 100 lines on purpose: the drain, event, allocation and connection steps share a dozen masks and
    arrays of the round, and one flat body is what both drivers trace; split, each piece would take and
    return most of the state.)"""
    xp = ops.xp
    B, KE = s["ev_n"].shape
    rows = xp.arange(B)[:, None]
    f64 = np.float64
    ev_n, ev_t, ev_k, ev_a = s["ev_n"], s["ev_t"], s["ev_k"], s["ev_a"]
    fs_f = s["fs_f"]
    occupied_ev = ev_n >= 0
    t_ev = xp.min(xp.where(occupied_ev & (ev_k != QUEUED), ev_t, INF), axis=1)
    t_dr = xp.min(s["fs_drain"], axis=1)
    live = (t_ev < INF) | (t_dr < np.inf)
    drain_row = live & (t_dr <= t_ev.astype(f64))
    ev_row = live & ~drain_row
    # ---------------------------------------------------------------- drains
    on = fs_f >= 0
    dmask = drain_row[:, None] & on & (s["fs_drain"] <= (t_dr + DRAIN_BATCH_NS)[:, None])
    drain_ns = xp.ceil(xp.where(dmask, s["fs_drain"], 0.0) - 1e-6).astype(np.int64)
    fin = xp.maximum(drain_ns, s["fs_post"]) + s["fs_lat"]
    fsafe = xp.where(on, fs_f, 0)
    fconn = xp.where(dmask, P["conn"][fsafe], -1)
    cmask = fconn >= 0
    C = s["conn_busy"].shape[1]
    conn_busy = ops.scatter_set(s["conn_busy"], rows, fconn, xp.zeros_like(cmask), cmask)
    conn_free = ops.scatter_set(s["conn_free"], rows, fconn, drain_ns, cmask)
    new_a_n = xp.where(dmask, P["flow_node"][fsafe], -1)
    new_a_t = fin
    fs_f = xp.where(dmask, -1, fs_f)
    fs_drain = xp.where(dmask, np.inf, s["fs_drain"])
    fs_rate = xp.where(dmask, 0.0, s["fs_rate"])
    # ---------------------------------------------------------------- due events (at most MDUE per round)
    T = t_ev
    due_all = ev_row[:, None] & occupied_ev & (ev_t == T[:, None])
    M = min(KE, MDUE)
    sel, due = _first(ops, xp, due_all, M)  # the first M due slots
    g_n = xp.take_along_axis(ev_n, sel, axis=1)
    g_k = xp.take_along_axis(ev_k, sel, axis=1)
    g_a = xp.take_along_axis(ev_a, sel, axis=1)
    nsafe = xp.where(due, g_n, 0)
    is_done = due & (g_k == DONE)
    succ = P["succ"][nsafe]  # [B, M, D]
    D = succ.shape[2]
    valid = is_done[:, :, None] & (succ >= 0)
    ssafe = xp.where(valid, succ, 0)
    r3 = xp.arange(B)[:, None, None]
    cnt = ops.scatter_add(s["cnt"], r3, ssafe, xp.full(ssafe.shape, -1, np.int32), valid)
    zero = valid & (cnt[r3, ssafe] == 0)
    lid = (xp.arange(M * D, dtype=np.int32).reshape(1, M, D) + 1)
    cnt = ops.scatter_min(cnt, r3, ssafe, -lid, zero)
    owner = zero & (cnt[r3, ssafe] == -lid)
    kind_v = P["kind"][ssafe]
    dur_v = _duration(xp, P, prm, ssafe, r3)
    cont = "eff" in P
    if cont:  # compute contention: SM holds taken and given back, compute ops in flight re-timed, new ones timed
        held, ck, touched = _holds(ops, P, s["held"], s["ck"], nsafe, is_done)
        # (each skipped in a round where no row needs it: most rounds at small B)
        ev_t, ev_ci, ev_cw, ev_ct, ev_ck, over_r = ops.cond(
            xp.any(touched & ev_row[:, None]), lambda: _retime(ops, P, prm, s, ck, touched, ev_row, T),
            lambda: (s["ev_t"], s["ev_ci"], s["ev_cw"], s["ev_ct"], s["ev_ck"], xp.zeros(B, bool)))
        dur_v, new_ci, new_cw, new_ck, over_s = ops.cond(
            xp.any(owner & (P["c_lane"][ssafe] >= 0)), lambda: _start_compute(ops, P, prm, ck, ssafe, owner, dur_v),
            lambda: (dur_v, xp.zeros(dur_v.shape, np.int64), xp.zeros(dur_v.shape, np.int64),
                     xp.zeros(dur_v.shape, np.int64), xp.zeros(B, bool)))
    t_new = T[:, None, None] + xp.where(kind_v == DELAY, dur_v, 0) \
        + xp.where(kind_v == FLOW, P["pre_ns"][ssafe], 0)
    new_b_n = xp.where(owner, ssafe, -1).reshape(B, M * D)
    new_b_t = t_new.reshape(B, M * D)
    new_b_k = xp.where(kind_v == FLOW, POST, DONE).astype(np.int8).reshape(B, M * D)
    if "probe" in P:  # (the ends the baseline's chain decisions are tested on)
        pid = P["probe"][nsafe]
        pm = is_done & (pid >= 0)
        extra_p = {"probe_t": ops.scatter_set(s["probe_t"], rows, xp.where(pm, pid, 0),
                                              xp.broadcast_to(T[:, None], pid.shape), pm)}
    else:
        extra_p = {}
    ndone = is_done.sum(axis=1)
    done_n = s["done_n"] + ndone
    t_end = xp.where(ndone > 0, xp.maximum(s["t_end"], T), s["t_end"])
    # posts and starts (in place in their slots)
    fl = xp.where(due, P["flow"][nsafe], 0)
    fl = xp.where(fl >= 0, fl, 0)
    is_post = due & (g_k == POST)
    selfl = is_post & P["self_loop"][fl]
    conn_f = P["conn"][fl]
    queue = is_post & ~selfl & (conn_f >= 0)
    start_now = (is_post & ~selfl & (conn_f < 0)) | (due & (g_k == START))
    post_t = xp.where(g_k == START, g_a, T[:, None])
    ev_k2 = ops.scatter_set(ev_k, rows, sel, xp.where(selfl, DONE, QUEUED).astype(np.int8), selfl | queue)
    ev_t2 = ops.scatter_set(ev_t, rows, sel, xp.where(selfl, T[:, None], INF), selfl | queue)
    ev_a2 = ops.scatter_set(ev_a, rows, sel, xp.broadcast_to(T[:, None], sel.shape), queue)
    ev_n2 = ops.scatter_set(ev_n, rows, sel, xp.full(sel.shape, -1, np.int32), is_done | start_now)
    # ---------------------------------------------------------------- queued flows take free connections (FIFO)
    qmask = (ev_n2 >= 0) & (ev_k2 == QUEUED)
    qn = xp.where(qmask, ev_n2, 0)
    qc = xp.where(qmask, P["conn"][xp.where(P["flow"][qn] >= 0, P["flow"][qn], 0)], 0)
    free_c = ~conn_busy[rows, qc]
    cand = qmask & free_c
    n_nodes = P["kind"].shape[0]
    key = ev_a2 * n_nodes + qn
    best = ops.scatter_min(xp.full((B, C), INF, np.int64), rows, qc, key, cand)
    win = cand & (best[rows, qc] == key)
    conn_busy = ops.scatter_set(conn_busy, rows, qc, xp.ones_like(win), win)
    win_t = xp.maximum(conn_free[rows, qc], ev_a2)
    ev_k2 = xp.where(win, START, ev_k2).astype(np.int8)
    ev_t2 = xp.where(win, win_t, ev_t2)
    # a flow posted this round whose connection is free now starts now (saves the round a START event takes)
    now_win = due & xp.take_along_axis(win & (win_t == T[:, None]), sel, axis=1)
    start_now = start_now | now_win
    ev_n2 = ops.scatter_set(ev_n2, rows, sel, xp.full(sel.shape, -1, np.int32), now_win)
    # flows entering the wire
    fpos, ffits = _alloc(ops, xp, fs_f >= 0, start_now)
    fs_f = ops.scatter_set(fs_f, rows, fpos, fl, start_now)
    wire = P["wire"][fl].astype(f64)
    fs_rem = ops.scatter_set(s["fs_rem"], rows, fpos, wire, start_now)
    fs_rate = ops.scatter_set(fs_rate, rows, fpos, xp.zeros_like(wire), start_now)
    fs_tupd = ops.scatter_set(s["fs_tupd"], rows, fpos, xp.broadcast_to(T[:, None].astype(f64), wire.shape),
                              start_now)
    fs_drain = ops.scatter_set(fs_drain, rows, fpos, xp.full(wire.shape, np.inf), start_now)
    fs_post = ops.scatter_set(s["fs_post"], rows, fpos, post_t, start_now)
    fs_lat = ops.scatter_set(s["fs_lat"], rows, fpos, _latency(xp, P, prm, fl, rows), start_now)
    # ---------------------------------------------------------------- new events into free slots
    new_n = xp.concatenate([new_a_n, new_b_n], axis=1)
    new_t = xp.concatenate([new_a_t, new_b_t], axis=1)
    new_k = xp.concatenate([xp.zeros(new_a_n.shape, np.int8), new_b_k], axis=1)
    want = new_n >= 0
    epos, efits = _alloc(ops, xp, ev_n2 >= 0, want)
    ev_n2 = ops.scatter_set(ev_n2, rows, epos, new_n, want)
    ev_t2 = ops.scatter_set(ev_t2, rows, epos, new_t, want)
    ev_k2 = ops.scatter_set(ev_k2, rows, epos, new_k, want)
    extra = {}
    if cont:  # (the anchors of the compute ops started this round: their start, their work, the SMs held then)
        zeros = xp.zeros(new_a_n.shape, np.int64)
        extra = {"held": held, "ck": ck,
                 "ev_ci": ops.scatter_set(ev_ci, rows, epos, xp.concatenate([zeros, new_ci.reshape(B, M * D)], 1),
                                          want),
                 "ev_cw": ops.scatter_set(ev_cw, rows, epos, xp.concatenate([zeros, new_cw.reshape(B, M * D)], 1),
                                          want),
                 "ev_ct": ops.scatter_set(ev_ct, rows, epos, xp.broadcast_to(T[:, None], want.shape), want),
                 "ev_ck": ops.scatter_set(ev_ck, rows, epos, xp.concatenate([zeros, new_ck.reshape(B, M * D)], 1),
                                          want)}
    flags = s["flags"] | xp.where(~efits, OVERFLOW_EVENTS, 0) | xp.where(~ffits, OVERFLOW_FLOWS, 0)
    if cont:
        flags = flags | xp.where(over_r | over_s, OVERFLOW_COMPUTE, 0)
    # ---------------------------------------------------------------- rates
    started = start_now.any(axis=1)
    refill = (drain_row & dmask.any(axis=1)) | (ev_row & started)
    t_r = xp.where(drain_row, t_dr, T.astype(f64))
    fs_rem, fs_rate, fs_tupd, fs_drain = _refill(ops, P, prm, fs_f, fs_rem, fs_rate, fs_tupd, fs_drain, refill, t_r)
    return {"cnt": cnt, "ev_n": ev_n2, "ev_t": ev_t2, "ev_k": ev_k2, "ev_a": ev_a2, "fs_f": fs_f, "fs_rem": fs_rem,
            "fs_rate": fs_rate, "fs_tupd": fs_tupd, "fs_drain": fs_drain, "fs_post": fs_post, "fs_lat": fs_lat,
            "conn_busy": conn_busy, "conn_free": conn_free, "done_n": done_n, "t_end": t_end, "flags": flags,
            "rounds": s["rounds"] + live.astype(np.int64),
            "peak_ev": xp.maximum(s["peak_ev"], (ev_n2 >= 0).sum(axis=1).astype(np.int32)),
            "peak_fl": xp.maximum(s["peak_fl"], (fs_f >= 0).sum(axis=1).astype(np.int32)), **extra, **extra_p}


def _rate(xp, k, sm):
    """(num, den): the compute-bound part's pace with ``k`` of ``sm`` SMs held (``SmShare.rate``)."""
    on = (k > 0) & (sm > 1)
    return xp.where(on, sm - xp.minimum(k, sm - 1), 1), xp.where(on, sm, 1)


def _wall(xp, w, d, dc, num, den):
    """Wall ns of ``w`` ns of nominal work of an op (nominal ``d``, compute-bound ``dc``) at num/den
    (``ContentionTracker._wall``: integer, rounded half up)."""
    triv = (num == den) | (dc <= 0) | (w <= 0)
    n = w * ((d - dc) * num + dc * den)
    q = xp.where(triv, 1, d * num)
    return xp.where(triv, w, (2 * n + q) // (2 * q))


def _work(xp, e, d, dc, num, den):
    """Nominal ns of work done in ``e`` wall ns at num/den (``ContentionTracker._work``)."""
    triv = (num == den) | (dc <= 0)
    q = xp.where(triv, 1, (d - dc) * num + dc * den)
    return xp.where(triv, e, (2 * (e * d * num) + q) // (2 * q))


def _holds(ops, P, held, ck, nsafe, is_done):
    """The SM holds the nodes ending this round take (once per hold: the first instance of an op to move) and give
    back; (held [B, H], SMs held per lane [B, lanes], lanes whose count was touched [B, lanes])."""
    xp = ops.xp
    B, M = nsafe.shape
    e = P["eff"][nsafe]  # [B, M, W]
    sign = P["eff_sign"][nsafe]
    ok = is_done[:, :, None] & (e >= 0)
    h = xp.where(ok, e, 0)
    r3 = xp.arange(B)[:, None, None]
    before = held[r3, h]
    rel = ok & (sign < 0) & (before == 1)
    take = ok & (sign > 0) & (before == 0)
    lid = xp.arange(1, 1 + e.shape[1] * e.shape[2], dtype=np.int32).reshape(1, e.shape[1], e.shape[2])
    held = ops.scatter_min(held, r3, h, -lid, take)  # (two instances of one op starting in one round: one holds)
    own = take & (held[r3, h] == -lid)
    held = ops.scatter_set(held, r3, h, xp.ones(h.shape, np.int32), take)
    held = ops.scatter_set(held, r3, h, xp.zeros(h.shape, np.int32), rel)
    lane = P["hold_lane"][h]
    sms = P["hold_sms"][h]
    ck = ops.scatter_add(ck, r3, lane, xp.where(own, sms, -sms), own | rel)
    touched = ops.scatter_set(xp.zeros(ck.shape, bool), r3, lane, xp.ones(h.shape, bool), own | rel)
    return held, ck, touched


def _chain_wall(xp, P, prm, rows, node, i0, w0, num, den):
    """Wall ns from member ``i0`` of ``node`` (``w0`` ns of its work left) through the node's last member at num/den,
    each member's wall rounded on its own (the coordinator's runs)."""
    last = P["mem_ptr"][node + 1]
    acc = xp.zeros(i0.shape, np.int64)
    for j in range(MAX_MEMBERS):
        m = i0 + j
        ok = m < last
        ms = xp.where(ok, m, 0)
        d, dc = prm["md"][rows, ms], prm["mdc"][rows, ms]
        acc = acc + xp.where(ok, _wall(xp, w0 if j == 0 else d, d, dc, num, den), 0)
    return acc


def _retime(ops, P, prm, s, ck, touched, ev_row, T):
    """Compute ops in flight on a lane whose SM count changed now (``ContentionTracker._retime``): the node's member
    in flight is found at the old pace from the anchor (a member ending now is done), keeps the work it did, and
    it and the members after it run at the new pace; a node ending now is left as it is. The arithmetic runs on
    the first ``R`` such slots of each row (``R``: compute nodes that can be in flight at once, an overflow flag
    beyond), not on the whole pool."""
    xp = ops.xp
    ev_n, ev_t = s["ev_n"], s["ev_t"]
    B = ev_n.shape[0]
    R = P["cslots"].shape[0]
    rows = xp.arange(B)[:, None]
    n_all = xp.where(ev_n >= 0, ev_n, 0)
    lane_all = P["c_lane"][n_all]
    run = ev_row[:, None] & (ev_n >= 0) & (s["ev_k"] == DONE) & (lane_all >= 0) & (ev_t > T[:, None]) \
        & touched[rows, xp.where(lane_all >= 0, lane_all, 0)]
    sel, have = _first(ops, xp, run, R)
    over = run.sum(axis=1) > R
    take = lambda a: xp.take_along_axis(a, sel, axis=1)  # noqa: E731
    n, t, w, i0, k0 = take(n_all), take(s["ev_ct"]), take(s["ev_cw"]), take(s["ev_ci"]), take(s["ev_ck"])
    lsafe = xp.where(have, P["c_lane"][n], 0)
    sm = P["lane_sm"][lsafe]
    k1 = ck[rows, lsafe]
    num0, den0 = _rate(xp, k0, sm)
    num1, den1 = _rate(xp, k1, sm)
    go = have & ~((k0 != k1) & (num0 * den1 == num1 * den0))  # (a count past S - 1 both times: the same pace)
    last = P["mem_ptr"][n + 1]
    i = xp.where(go, i0, 0)
    Tc = T[:, None]
    md, mdc = prm["md"], prm["mdc"]
    for _ in range(MAX_MEMBERS - 1):
        e = t + _wall(xp, w, md[rows, i], mdc[rows, i], num0, den0)
        adv = go & (e <= Tc) & (i + 1 < last)
        t = xp.where(adv, e, t)
        i = xp.where(adv, i + 1, i)
        w = xp.where(adv, md[rows, i], w)
    w = xp.maximum(0, w - _work(xp, Tc - t, md[rows, i], mdc[rows, i], num0, den0))
    end = Tc + _chain_wall(xp, P, prm, rows, n, i, w, num1, den1)
    put = lambda a, v: ops.scatter_set(a, rows, sel, v, go)  # noqa: E731
    return (put(ev_t, end), put(s["ev_ci"], i), put(s["ev_cw"], w), put(s["ev_ct"], xp.broadcast_to(Tc, sel.shape)),
            put(s["ev_ck"], k1), over)


def _start_compute(ops, P, prm, ck, node, owner, dur):
    """Durations of the nodes released this round ([B, M, D]) at the SMs held now on their lanes (the compute ones
    among the first ``R`` of each row: an overflow flag beyond); the anchors of their first members (member id,
    its work, the SM count)."""
    xp = ops.xp
    B = node.shape[0]
    R = P["cslots"].shape[0]
    rows = xp.arange(B)[:, None]
    flat_n = node.reshape(B, -1)
    flat_d = dur.reshape(B, -1)
    lane_all = P["c_lane"][flat_n]
    comp = owner.reshape(B, -1) & (lane_all >= 0)
    sel, have = _first(ops, xp, comp, R)
    over = comp.sum(axis=1) > R
    n = xp.take_along_axis(flat_n, sel, axis=1)
    lsafe = xp.where(have, P["c_lane"][n], 0)
    k = ck[rows, lsafe]
    num, den = _rate(xp, k, P["lane_sm"][lsafe])
    i0 = P["mem_ptr"][n]
    w0 = prm["md"][rows, i0]
    wall = _chain_wall(xp, P, prm, rows, n, i0, w0, num, den)
    i0_all = P["mem_ptr"][flat_n]
    w0_all = prm["md"][rows, i0_all]
    shape = node.shape
    return (ops.scatter_set(flat_d, rows, sel, wall, have).reshape(shape), i0_all.reshape(shape),
            w0_all.reshape(shape), ops.scatter_set(xp.zeros(flat_n.shape, np.int64), rows, sel, k, have).reshape(shape),
            over)


def _duration(xp, P, prm, node, rows):
    """A DELAY node's duration in each experiment (:func:`node_durations`)."""
    return prm["dur"][rows, node]


def member_durations(prog: Program, lane_slow: np.ndarray) -> np.ndarray:
    """int64[B, M]: every DELAY member's duration per experiment, a compute member's ``round(unscaled * lane
    slowdown)`` (half to even: Python's ``round``, as the coordinator's duration tables)."""
    ns = prog.member_ns
    lane = prog.member_lane
    comp = lane >= 0
    d = np.broadcast_to(ns, (lane_slow.shape[0], len(ns))).copy()
    if comp.any():
        d[:, comp] = np.rint(ns[comp].astype(np.float64) * lane_slow[:, lane[comp]]).astype(np.int64)
    return d


def node_durations(prog: Program, lane_slow: np.ndarray) -> np.ndarray:
    """int64[B, N]: every node's duration per experiment: a DELAY's members summed (:func:`member_durations`)."""
    d = member_durations(prog, lane_slow)
    cs = np.zeros((d.shape[0], d.shape[1] + 1), np.int64)
    np.cumsum(d, axis=1, out=cs[:, 1:])
    return cs[:, prog.member_ptr[1:]] - cs[:, prog.member_ptr[:-1]]


def _latency(xp, P, prm, fl, rows):
    """Fixed latency of flow ``fl`` [B, K]: propagation, switch pipelines, store-and-forward of its last packet."""
    path = P["path"][fl]
    lat_links = prm["path_lat"][rows, path]  # [B, K, P]
    inv = xp.zeros(fl.shape, np.float64)
    for p in range(lat_links.shape[2]):  # (left to right, as the flow backend sums)
        inv = inv + 1.0 / prm["cap"][rows, lat_links[:, :, p]]
    saf = xp.ceil(P["tail"][fl].astype(np.float64) * inv - 1e-9).astype(np.int64)
    return prm["path_prop"][rows, path] + prm["path_hops"][rows, path] * prm["hop_ns"][:, None] + saf


def _refill(ops, P, prm, fs_f, rem, rate, tupd, drain, rowmask, t):
    """Max-min fair rates of the flows on the wire in ``rowmask`` rows (progressive filling), committed at ``t``."""
    xp = ops.xp
    B, KF = fs_f.shape
    on = (fs_f >= 0) & rowmask[:, None]
    links = prm["path_links"][xp.arange(B)[:, None], P["path"][xp.where(fs_f >= 0, fs_f, 0)]]  # [B, KF, P]
    L1 = prm["cap"].shape[1]
    real = on[:, :, None] & (links < L1 - 1)
    r3 = xp.arange(B)[:, None, None]
    cap = prm["cap"]

    def cond(st):
        return st[0].any()

    def body(st):
        unf, nr, load = st
        u3 = real & unf[:, :, None]
        cnt = ops.scatter_add(xp.zeros((B, L1), np.int32), r3, links, xp.ones(links.shape, np.int32), u3)
        res = xp.maximum(cap - load, 0.0)
        share = xp.where(cnt > 0, res / xp.maximum(cnt, 1), np.inf)
        at = share[r3, links]  # [B, KF, P]
        fmin = xp.min(xp.where(u3, at, np.inf), axis=2)
        bad = u3 & (fmin[:, :, None] < at)
        nbad = ops.scatter_add(xp.zeros((B, L1), np.int32), r3, links, xp.ones(links.shape, np.int32), bad)
        ok = (cnt > 0) & (nbad == 0)
        frz = unf & xp.any(u3 & ok[r3, links], axis=2)
        nr = xp.where(frz, fmin, nr)
        load = ops.scatter_add(load, r3, links, xp.broadcast_to(fmin[:, :, None], links.shape),
                               real & frz[:, :, None])
        return unf & ~frz, nr, load

    unf0 = on & xp.any(real, axis=2)
    _, nr, _ = ops.while_loop(cond, body, (unf0, xp.zeros((B, KF), np.float64), xp.zeros((B, L1), np.float64)))
    tt = t[:, None]
    change = on & ((nr != rate) | (drain == np.inf))
    rem2 = xp.where(change & (rate != 0.0), rem - rate * (tt - tupd), rem)
    tupd2 = xp.where(change, tt, tupd)
    drain2 = xp.where(change, xp.where(nr > 0.0, tt + xp.maximum(rem2, 0.0) / xp.where(nr > 0.0, nr, 1.0), np.inf),
                      drain)
    rate2 = xp.where(change, nr, rate)
    return rem2, rate2, tupd2, drain2


def program_arrays(prog: Program) -> dict:
    out = _program_arrays(prog)
    if prog.num_flows == 0:  # (a program without flows: one unused flow, so that gathers have a row to read)
        for k in ("flow_node", "wire", "tail", "path", "self_loop", "conn"):
            out[k] = np.full(1, -1 if k in ("flow_node", "conn") else 0, out[k].dtype)
    return out


def _program_arrays(prog: Program) -> dict:
    cont = {}
    if prog.contention:
        cont = {"c_lane": prog.c_lane, "mem_ptr": prog.member_ptr, "lane_sm": prog.lane_sm, "eff": prog.eff,
                "eff_sign": prog.eff_sign,
                "hold_lane": prog.hold_lane if len(prog.hold_lane) else np.zeros(1, np.int32),
                "hold_sms": prog.hold_sms if len(prog.hold_sms) else np.zeros(1, np.int64),
                "cslots": np.zeros(prog.meta.get("compute_slots_run", prog.meta.get("compute_slots", 8)), np.int8)}
        if prog.probe is not None:
            cont["probe"] = prog.probe
    return {**cont, "kind": prog.kind, "pre_ns": prog.pre_ns, "flow": prog.flow, "succ": prog.succ, "flow_node": prog.flow_node,
            "wire": prog.wire_bytes, "tail": prog.tail_bytes, "path": prog.path, "self_loop": prog.self_loop,
            "conn": prog.conn}


def initial_state(prog: Program, B: int, KE: int, KF: int) -> dict:
    """Every experiment at time 0 with the nodes that wait on nothing ready (their events queued at 0)."""
    n = prog.num_nodes
    roots = np.nonzero(prog.indeg == 0)[0]
    if len(roots) > KE:
        KE = len(roots)
    ev_n = np.full((B, KE), -1, np.int32)
    ev_t = np.full((B, KE), INF, np.int64)
    ev_k = np.zeros((B, KE), np.int8)
    ev_a = np.zeros((B, KE), np.int64)
    cnt = np.broadcast_to(prog.indeg, (B, n)).copy()
    # the nodes that wait on nothing: a JOIN ends at 0, a DELAY after its duration, a FLOW is posted after its
    # pre_ns (times per experiment: _root_times)
    ev_n[:, :len(roots)] = roots
    ev_k[:, :len(roots)] = np.where(prog.kind[roots] == FLOW, POST, DONE)
    ev_t[:, :len(roots)] = 0
    return {"cnt": cnt, "ev_n": ev_n, "ev_t": ev_t, "ev_k": ev_k, "ev_a": ev_a,
            "fs_f": np.full((B, KF), -1, np.int32), "fs_rem": np.zeros((B, KF)), "fs_rate": np.zeros((B, KF)),
            "fs_tupd": np.zeros((B, KF)), "fs_drain": np.full((B, KF), np.inf),
            "fs_post": np.zeros((B, KF), np.int64), "fs_lat": np.zeros((B, KF), np.int64),
            "conn_busy": np.zeros((B, max(1, prog.meta.get("connections", 0))), bool),
            "conn_free": np.zeros((B, max(1, prog.meta.get("connections", 0))), np.int64),
            "done_n": np.zeros(B, np.int64), "t_end": np.zeros(B, np.int64), "flags": np.zeros(B, np.int32),
            "rounds": np.zeros(B, np.int64), "peak_ev": np.zeros(B, np.int32), "peak_fl": np.zeros(B, np.int32),
            **({"probe_t": np.full((B, max(1, prog.checks.num_probes)), INF, np.int64)} if prog.probe is not None
               else {})}


_INT_LIMIT = 1 << 62
"""Bound on the integer products of the contention arithmetic (``_wall``: ns x ns x SMs) in int64."""


def compute_parts(prog: Program, md: np.ndarray) -> np.ndarray:
    """int64[B, M]: each member's compute-bound ns, ``round(duration * comp / (comp + mem))`` (half to even, as
    ``ContentionTracker._compute_part``), 0 for a fixed member. One line where a duration is too long for the int64
    arithmetic of the re-timing."""
    share = prog.member_share
    dc = np.rint(md * share[:, 0] / share[:, 1]).astype(np.int64)
    c = share[:, 0] > 0
    if c.any():
        dmax = int(md[:, c].max())
        if 4 * dmax * dmax * max(int(prog.lane_sm.max()), 1) >= _INT_LIMIT:
            from heterosim.errors import UserError

            raise UserError("a compute op is too long for the batch engine's contention arithmetic (int64); use "
                            "heterosim run", field="compute op duration_ns", value=dmax)
    return dc


def _contention_state(prog: Program, md: np.ndarray, st: dict) -> None:
    """Nothing held at 0; the root events' anchors (a root node starts at 0 with its first member's work ahead)."""
    B, KE = st["ev_n"].shape
    st["held"] = np.zeros((B, max(1, len(prog.hold_lane))), np.int32)
    st["ck"] = np.zeros((B, max(1, len(prog.lane_sm))), np.int64)
    n = st["ev_n"]
    first = prog.member_ptr[np.where(n >= 0, n, 0)]
    ok = (n >= 0) & (first < md.shape[1])
    st["ev_ci"] = np.where(ok, first, 0).astype(np.int64)
    st["ev_cw"] = np.where(ok, np.take_along_axis(md, np.where(ok, first, 0), axis=1), 0).astype(np.int64)
    st["ev_ct"] = np.zeros((B, KE), np.int64)
    st["ev_ck"] = np.zeros((B, KE), np.int64)


def _root_times(prog: Program, dur: np.ndarray, state: dict) -> None:
    roots = state["ev_n"][0]
    r = roots[roots >= 0]
    d = np.where(prog.kind[r] == DELAY, dur[:, r], 0) + np.where(prog.kind[r] == FLOW, prog.pre_ns[r], 0)
    state["ev_t"][:, :len(r)] = d


def run_numpy(prog: Program, prm: Params, KE: int | None = None, KF: int | None = None) -> BatchResult:
    """The reference driver: the loop body on NumPy, one Python iteration per round."""
    return _drive(prog, prm, KE, KF, jax=False)


def run_jax(prog: Program, prm: Params, KE: int | None = None, KF: int | None = None) -> BatchResult:
    """The same loop body under ``jax.jit`` + ``lax.while_loop`` (float64), on JAX's default device."""
    return _drive(prog, prm, KE, KF, jax=True)


def default_pools(prog: Program) -> tuple[int, int]:
    """Pool sizes a baseline run of the program fits in with room: 1.5 times its peaks plus 16, measured by one run
    at B = 1 (NumPy; JAX where it is installed for programs over ``JAX_POOLS_NODES``), pools doubled until it fits."""
    hit = prog.meta.get("pools")
    if hit is None:
        from heterosim.batch.variants import baseline_params

        on_jax = False
        if prog.num_nodes > JAX_POOLS_NODES:
            try:
                import jax

                on_jax = jax is not None
            except ImportError:
                pass
        res = _drive(prog, baseline_params(prog, 1), 64, 32, jax=on_jax, measure=True)
        hit = prog.meta["pools"] = (max(64, 3 * res.pools[0] // 2 + 16), max(32, 3 * res.pools[1] // 2 + 16))
    return hit


def _drive(prog: Program, prm: Params, KE, KF, jax: bool, measure: bool = False) -> BatchResult:
    if KE is None or KF is None:
        ke0, kf0 = default_pools(prog)
        KE, KF = KE or ke0, KF or kf0
    while True:
        res = _drive_once(prog, prm, KE, KF, jax, measure)
        bad = np.bitwise_or.reduce(res.flags) if len(res.flags) else 0
        if bad & OVERFLOW_COMPUTE:  # (more compute nodes at once than the program's bound: all the pool's)
            if prog.meta.get("compute_slots_run", 0) >= KE:
                raise RuntimeError("internal: compute slots overflow with the whole event pool")
            prog.meta["compute_slots_run"] = KE
            continue
        if not bad & (OVERFLOW_EVENTS | OVERFLOW_FLOWS):
            return res
        # (a run stops at its first overflow, so the other pool may be short too: both grow, one recompile)
        KE, KF = (KE * 2, KF * 2) if measure else (KE * 2 if bad & OVERFLOW_EVENTS else KE,
                                                    KF * 2 if bad & OVERFLOW_FLOWS else KF)


JAX_POOLS_NODES = 20_000
"""Programs above this many nodes measure their pools on JAX (a compile, then ~10x NumPy's pace: qs-128's 75k
nodes took 80 s on NumPy); smaller ones on NumPy (seconds, no compile)."""

_COMPILED: dict = {}
"""Compiled JAX loops by the shapes of their inputs (a program's batches of one size share one)."""


def _jax_run(P, pr, s):
    import jax
    import jax.numpy as jnp

    ops = _Ops(jnp, jax.lax)

    def cond(x):
        return jnp.any(((x["ev_n"] >= 0) & (x["ev_k"] != QUEUED)).any(axis=1) | (x["fs_f"] >= 0).any(axis=1)) \
            & ~jnp.any(x["flags"] & _OVERFLOW != 0)

    return ops.while_loop(cond, lambda x: _round(ops, P, pr, x), s)


def _drive_once(prog: Program, prm: Params, KE: int, KF: int, jax: bool, measure: bool) -> BatchResult:
    B = prm.batch
    st = initial_state(prog, B, KE, KF)
    dur = node_durations(prog, prm.lane_slow)
    _root_times(prog, dur, st)
    P = program_arrays(prog)
    pr = {"cap": prm.cap, "dur": dur, "hop_ns": prm.hop_ns, "path_links": prm.path_links, "path_lat": prm.path_lat,
          "path_prop": prm.path_prop, "path_hops": prm.path_hops}
    if prog.contention:
        md = member_durations(prog, prm.lane_slow)
        mdc = compute_parts(prog, md)
        _contention_state(prog, md, st)
        pad = np.zeros((B, 1), np.int64)  # (a column past the last member: gathers of masked rows read it)
        pr["md"], pr["mdc"] = np.concatenate([md, pad], 1), np.concatenate([mdc, pad], 1)
    t0 = time.perf_counter()
    compile_s = 0.0
    if jax:
        import jax as _jax
        import jax.numpy as jnp

        _jax.config.update("jax_enable_x64", True)

        Pj = {k: jnp.asarray(v) for k, v in P.items()}
        prj = {k: jnp.asarray(v) for k, v in pr.items()}
        sj = {k: jnp.asarray(v) for k, v in st.items()}
        sig = tuple((k, v.shape, str(v.dtype)) for d in (Pj, prj, sj) for k, v in sorted(d.items()))
        lowered = _COMPILED.get(sig)
        if lowered is None:
            lowered = _COMPILED[sig] = _jax.jit(_jax_run).lower(Pj, prj, sj).compile()
        compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = lowered(Pj, prj, sj)
        out = {k: np.asarray(v) for k, v in out.items()}
    else:
        ops = _Ops(np)
        s = st
        while True:
            live = ((s["ev_n"] >= 0) & (s["ev_k"] != QUEUED)).any(axis=1) | (s["fs_f"] >= 0).any(axis=1)
            if not live.any() or np.any(s["flags"] & _OVERFLOW):
                break
            s = _round(ops, P, pr, s)
        out = s
    wall = time.perf_counter() - t0
    flags = out["flags"].copy()
    flags |= np.where(out["done_n"] < prog.num_nodes, STALLED, 0).astype(np.int32)
    return BatchResult(out["t_end"].copy(), flags, int(out["rounds"].max()) if B else 0, wall, compile_s,
                       (int(out["peak_ev"].max()), int(out["peak_fl"].max())) if measure else (KE, KF),
                       out["probe_t"].copy() if "probe_t" in out else None)
