"""Compute slowed by communication running beside it on the same GPU (``simulation.compute_contention``).

Mechanism. A NCCL collective or send/recv is a CUDA kernel launched with one thread block (CTA) per channel,
each resident on one SM for the kernel's whole run (NCCL ``src/enqueue.cc``: the kernel's grid is
``nChannels`` blocks, ``src/device/common.h``: block ``blockIdx.x`` drives channel ``blockIdx.x``; NCCL's
docs, "NCCL_MIN_CTAS / NCCL_MAX_CTAS": "the number of CTAs (i.e. channels) NCCL uses"). That holds for
NVLink collectives (the copies are done by those SMs) and for inter-node ones (the CTAs feed the proxy's
buffers). Transformer Engine's userbuffers TP overlap gives its communication kernels ``num_sm`` SMs and
launches the overlapped GEMM on the others (``set_sm_margin``; ``transformer_engine/pytorch/module/base.py``
``initialize_ub``: ``num_sm`` 1 for ``ring_exchange`` (copy-engine transfers), 16 for ``pipeline``/``bulk``).
While k of a GPU's S SMs are held, its compute kernels run on S - k.

Model (``sm_share``, first order): a compute-bound kernel's time is set by its waves of thread blocks over the
SMs, so on S - k SMs it progresses at (S - k) / S of its rate; a memory-bound kernel saturates HBM with fewer
SMs and keeps its rate (HBM bandwidth the communication takes is not modelled). An op's compute-bound part is
its GEMM and attention kernels (``COMPUTE_BOUND_CLASSES``, their share of its time from the compute model);
the op progresses through its nominal time at a mixed rate: held k SMs for its whole run, it takes
``d_mem + d_compute * S / (S - k)``. k is the sum over the GPU's communication in flight of its SMs: NCCL's
channel count for the collective as the comm planner chose it (``heterosim/comm/planner.py``, ``comm.channels``),
``USERBUFFERS_NUM_SM`` for userbuffers pieces; capped at S - 1. It changes when communication on the GPU
starts moving (every peer has posted: a kernel waiting for its peers also spins on its SMs, but the IR posts
pipeline receives at the program's start, which is not when the real kernel launches) and when it ends; the
compute op in flight is then re-timed (integer ns, deterministic). A lane (TP group, lock-step) holds what one
of its GPUs holds: each of its ranks runs its own instance of the lane's collective, with the same channels.

Exactness of the coordinator's chains (several local ops run in one step, ahead of the clock) is kept: a
chain in flight is re-timed from the op running when k changes; a TP collective inside a chain holds SMs
while the lane's compute stream waits on the chain, so its SMs slow nothing and are not counted (with one
compute stream per program; programs with several run without chains under contention).
"""
from __future__ import annotations

from typing import Any

COMPUTE_BOUND_CLASSES = frozenset({"gemm", "attention", "layer"})
"""Kernel classes whose time scales with the SMs they get (``layer`` without kernels: a fused block timed as one)."""

USERBUFFERS_NUM_SM = {"allgather": 1, "reducescatter": 16}
"""SMs a Transformer Engine userbuffers piece holds: the compiler's ring-exchange all-gather (``num_sm`` 1) and
pipelined reduce-scatter (``num_sm`` 16): TE ``initialize_ub`` defaults (``transformer_engine/pytorch/module/
base.py``, ``get_default_config``)."""


class ContentionModel:
    """How fast a kernel's compute-bound part runs on a GPU of ``sm_count`` SMs while ``held`` are taken."""

    name = "base"

    def rate(self, held: int, sm_count: int) -> tuple[int, int]:
        """(num, den): the compute-bound part's progress rate, num / den of its rate alone (num > 0)."""
        raise NotImplementedError


class NoContention(ContentionModel):
    """Communication is free for compute (HeteroSim before issue 42's contention work)."""

    name = "none"

    def rate(self, held: int, sm_count: int) -> tuple[int, int]:
        return 1, 1


class SmShare(ContentionModel):
    """The compute-bound part runs on the SMs communication leaves: (S - k) / S."""

    name = "sm_share"

    def rate(self, held: int, sm_count: int) -> tuple[int, int]:
        if held <= 0 or sm_count <= 1:  # (a device without an SM count: no contention)
            return 1, 1
        return sm_count - min(held, sm_count - 1), sm_count


MODELS: dict[str, ContentionModel] = {m.name: m for m in (NoContention(), SmShare())}


class _Run:
    """Local ops of one lane started as one step (a chain, or one op), with their provisional times."""

    __slots__ = ("lane", "ops", "idx", "t_a", "w_a", "k", "version", "compute", "end", "nominal")

    def __init__(self, lane, ops: list[int], k: int, w0: int, now: int, compute: bool, end: int,
                 nominal: int) -> None:
        self.lane, self.ops, self.idx, self.t_a, self.w_a, self.k = lane, ops, 0, now, w0, k
        self.version = 0
        self.nominal = nominal
        """The ops' summed nominal time (what the run takes with nothing held)."""
        self.end = end
        """The last op's end (the ops before it have theirs in the lane's ``end_ns``, as a chain's do)."""
        self.compute = compute
        """Whether some op of the run is a compute op (else no change of k can move it)."""


class _LaneKind:
    """Per lane kind (its duration table): SM count, compute-bound ns per op, whether chains may run."""

    __slots__ = ("sm", "dc", "chains", "walls", "dur")

    def __init__(self, sm: int, dc: list[int], chains: bool, dur: list[int]) -> None:
        self.sm, self.dc, self.chains, self.dur = sm, dc, chains, dur
        self.walls: dict[tuple[int, int], list[int]] = {}
        """(num, den) -> per op its whole duration at that rate (-1: not computed yet); comm ops: nominal."""

    def walls_at(self, num: int, den: int) -> list[int]:
        w = self.walls.get((num, den))
        if w is None:
            dur, dc = self.dur, self.dc
            w = self.walls[(num, den)] = [d if c < 0 else ContentionTracker._wall(d, d, c, num, den)
                                          for d, c in zip(dur, dc)]
        return w


class ContentionTracker:
    """Per lane: SMs held by communication in flight, local runs in flight; re-times them when k changes."""

    def __init__(self, coord, model: ContentionModel) -> None:
        self.c = coord
        self.model = model
        self.held: dict[int, int] = {}
        self.holds: dict[tuple[int, int], int] = {}
        self.runs: dict[int, list[_Run]] = {}
        self.kinds: dict[int, _LaneKind] = {}
        self.stretch_ns: dict[int, int] = {}
        """Lane id -> ns its compute ops took beyond their nominal time."""
        self.retimes = 0
        self._sms_memo: dict[tuple, int] = {}
        self._kernel_memo: dict[int, tuple] = {}

    # ------------------------------------------------------------------ per lane kind
    def _kind(self, lane) -> _LaneKind:
        kd = self.kinds.get(lane.id)
        if kd is None:
            table = lane.dur
            kd = self.kinds.get(-id(table) - 1)  # (shared by lanes with one duration table)
            if kd is None:
                kd = self.kinds[-id(table) - 1] = self._make_kind(lane)
            self.kinds[lane.id] = kd
        return kd

    def _make_kind(self, lane) -> _LaneKind:
        from heterosim.hardware import get_device

        c = self.c
        device = get_device(lane.device)
        prog = lane.prog
        dc = []
        streams = set()
        for op, d in zip(prog.ops, lane.dur):
            if op.kind != "compute" or d < 0:
                dc.append(-1)
                continue
            streams.add(op.stream)
            dc.append(self._compute_part(op, d, device))
        return _LaneKind(int(getattr(device, "sm_count", 0) or 0), dc, len(streams) <= 1, lane.dur)

    def _compute_part(self, op, d: int, device) -> int:
        """ns of the op's nominal ``d`` spent in compute-bound kernels (their share of the kernels' times)."""
        k = op.kernels
        if not k or op.duration_ns >= 0 or not hasattr(self.c.compute, "kernel_time_ns"):
            return d if op.op_class in COMPUTE_BOUND_CLASSES else 0
        hit = self._kernel_memo.get(id(k))
        if hit is None or hit[0] is not k:
            comp = mem = 0.0
            for cls, flops, nbytes, mnk in k:
                t = self.c.compute.kernel_time_ns(cls, flops, nbytes, mnk, device, self.c.precision)
                if cls in ("gemm", "attention"):
                    comp += t
                else:
                    mem += t
            hit = self._kernel_memo[id(k)] = (k, comp, mem)
        comp, mem = hit[1], hit[2]
        return int(round(d * comp / (comp + mem))) if comp + mem > 0 else 0

    # ------------------------------------------------------------------ durations at a rate
    @staticmethod
    def _wall(w: int, d: int, dc: int, num: int, den: int) -> int:
        """Wall ns for ``w`` ns of nominal work of an op (nominal ``d``, compute-bound ``dc``) at rate num/den."""
        if num == den or dc <= 0 or w <= 0:
            return w
        n = w * ((d - dc) * num + dc * den)
        q = d * num
        return (2 * n + q) // (2 * q)

    @staticmethod
    def _work(e: int, d: int, dc: int, num: int, den: int) -> int:
        """Nominal ns of work done in ``e`` wall ns at rate num/den (the inverse of :meth:`_wall`)."""
        if num == den or dc <= 0:
            return e
        n = e * d * num
        q = (d - dc) * num + dc * den
        return (2 * n + q) // (2 * q)

    def _rate(self, lane_id: int, sm: int) -> tuple[int, int]:
        return self.model.rate(self.held.get(lane_id, 0), sm)

    # ------------------------------------------------------------------ local ops (the coordinator's hooks)
    def start_local(self, lane, oid: int) -> None:
        """Start local op ``oid`` (its stream marked busy, its start set) and the chain after it
        (as ``Coordinator._run_chain``, durations at the lane's current rate); queue the run's end."""
        c = self.c
        now = c._now
        kd = self._kind(lane)
        num, den = self._rate(lane.id, kd.sm)
        prog = lane.prog
        ops, dc = prog.ops, kd.dc
        dur = lane.dur
        walls = dur if num == den else kd.walls_at(num, den)
        first_comm = dc[oid] < 0
        end = now + walls[oid]
        nominal = dur[oid]
        run_ops = [oid]
        has_compute = not first_comm
        if kd.chains and prog.chain_next[oid] >= 0:
            from heterosim.sim.coordinator import chain_step

            nxt, remaining = prog.chain_next, lane.remaining
            cur = oid
            z = nxt[cur]
            while z >= 0 and remaining[z] == 1 and dur[z] >= 0:
                if dc[z] < 0 and not has_compute:  # a TP collective after TP collectives: its own step
                    break
                if not chain_step(lane, cur, z, end):
                    break
                cur = z
                end += walls[z]
                nominal += dur[z]
                has_compute = has_compute or dc[z] >= 0
                run_ops.append(z)
                z = nxt[cur]
        if first_comm and len(run_ops) == 1:  # a TP collective beside the compute stream: holds SMs meanwhile
            self._hold(lane.id, oid, self._local_sms(lane, ops[oid]), kd.sm)
        run = _Run(lane, run_ops, self.held.get(lane.id, 0), dur[oid], now, has_compute, end, nominal)
        self.runs.setdefault(lane.id, []).append(run)
        c._push(end, 1, ("ct_done", (run, 0)))

    def done(self, arg) -> None:
        """A run's queued end popped: complete its last op unless the run was re-timed since."""
        run, version = arg
        if version != run.version:
            return
        lane = run.lane
        self.runs[lane.id].remove(run)
        if run.compute:  # (its TP collectives keep their time: the stretch is its compute ops')
            extra = self.c._now - lane.start_ns[run.ops[0]] - run.nominal
            if extra:
                self.stretch_ns[lane.id] = self.stretch_ns.get(lane.id, 0) + extra
        self.c._complete_op(lane, run.ops[-1])

    def op_done(self, lane, oid: int) -> None:
        """Any op of the lane completed: its SMs (if it held some) are free again."""
        sms = self.holds.pop((lane.id, oid), None)
        if sms is not None:
            self.held[lane.id] -= sms
            self._changed(lane)

    # ------------------------------------------------------------------ communication moving
    def comm_moving(self, inst, followers=()) -> None:
        """A collective instance (and the parallel groups riding with it) or a pipeline transfer started
        moving: each lane in it holds the instance's SMs until its op completes."""
        c = self.c
        for f in (inst, *followers):
            op = f.op
            p2p = getattr(f, "p2p_ops", None)
            if p2p is not None:
                a, b = c.lanes[p2p[0][0]].ranks[0], c.lanes[p2p[1][0]].ranks[0]
                sms = self._sms("send", (a, b), op.size_bytes)
            else:
                sms = self._sms(op.collective, f.ranks, op.size_bytes)
            if sms <= 0:
                continue
            for lane_id, oid in f.lane_ops.items():
                if (lane_id, oid) not in self.holds:
                    lane = c.lanes[lane_id]
                    self._hold(lane_id, oid, sms, self._kind(lane).sm)

    def _hold(self, lane_id: int, oid: int, sms: int, sm: int) -> None:
        if sms <= 0 or sm <= 1:
            return
        self.holds[(lane_id, oid)] = sms
        self.held[lane_id] = self.held.get(lane_id, 0) + sms
        self._changed(self.c.lanes[lane_id])

    def _local_sms(self, lane, op) -> int:
        if op.name.endswith("_ub"):  # Transformer Engine userbuffers piece (heterosim/workload/compiler.py)
            return USERBUFFERS_NUM_SM.get(op.collective, USERBUFFERS_NUM_SM["reducescatter"])
        return self._sms(op.collective, lane.ranks, op.size_bytes)

    def _sms(self, collective: str, ranks: tuple, size: int) -> int:
        """NCCL channels (= CTAs = SMs per GPU) the comm planner gives this collective on these ranks."""
        key = (collective, size, ranks)
        v = self._sms_memo.get(key)
        if v is None:
            c = self.c
            if size <= 0 or len(ranks) < 2:
                v = 0
            elif c._one_node(ranks):
                gpus = c.system.gpus
                spec = (collective, size, len(ranks), gpus[ranks[0]].group, tuple(gpus[r].local for r in ranks))
                v = self._sms_memo.get(spec)
                if v is None:
                    sched = c.plan(collective, ranks, size, c.system, **c._plan_kwargs(collective))
                    v = int(getattr(sched, "channels", 1))
                    self._sms_memo[spec] = v
            else:
                xfers = c._planned(collective, ranks, size)[0]
                v = 1 + max(x.channel for x in xfers) if xfers else 0
            self._sms_memo[key] = v
        return v

    # ------------------------------------------------------------------ re-timing
    def _changed(self, lane) -> None:
        runs = self.runs.get(lane.id)
        if not runs:
            return
        for run in runs:
            if run.compute:
                self._retime(run)

    def _retime(self, run: _Run) -> None:
        """k changed now: the op of the run in flight keeps the work it did at the old rate, the rest of the run
        is timed at the new one; the run's end is queued again."""
        now = self.c._now
        lane = run.lane
        kd = self._kind(lane)
        k = self.held.get(lane.id, 0)
        if k == run.k:
            return
        ops, dc, dur = run.ops, kd.dc, lane.dur
        start_ns, end_ns = lane.start_ns, lane.end_ns
        i = run.idx
        n = len(ops)
        while i < n - 1 and end_ns[ops[i]] <= now:
            i += 1
        if run.end <= now:  # (its end is due now)
            return
        num0, den0 = self.model.rate(run.k, kd.sm)
        num, den = self.model.rate(k, kd.sm)
        run.k = k
        if (num0, den0) == (num, den):
            return
        o = ops[i]
        d = dur[o]
        if dc[o] < 0:
            w = d
            end = start_ns[o] + d
        else:
            t0, w0 = (run.t_a, run.w_a) if i == run.idx else (start_ns[o], d)
            w = max(0, w0 - self._work(now - t0, d, dc[o], num0, den0))
            end = now + self._wall(w, d, dc[o], num, den)
        run.idx, run.t_a, run.w_a = i, now, w
        walls = dur if num == den else kd.walls_at(num, den)
        for o in ops[i + 1:]:
            end_ns[ops[i]] = end
            start_ns[o] = end
            end += walls[o]
            i += 1
        run.end = end
        run.version += 1
        self.retimes += 1
        self.c._push(end, 1, ("ct_done", (run, run.version)))

    def summary(self, lanes: list) -> dict[str, Any]:
        """What contention did: the model, re-times, compute stretch per simulated lane (mean, max ns)."""
        vals = [self.stretch_ns.get(l.id, 0) for l in lanes]
        return {"model": self.model.name, "retimes": self.retimes,
                "compute_stretch_ns_mean": (sum(vals) / len(vals)) if vals else 0.0,
                "compute_stretch_ns_max": max(vals) if vals else 0}


def tracker_for(coord, name: str | None) -> ContentionTracker | None:
    """The tracker of model ``name`` (None: ``simulation.compute_contention``'s default), or None for ``none``
    or a run without a compute model (communication alone)."""
    if name is None:
        from heterosim.config.scenario import SimulationConfig

        name = SimulationConfig.model_fields["compute_contention"].default
    model = MODELS.get(name)
    if model is None:
        from heterosim.errors import SimulationError

        raise SimulationError(f"unknown compute_contention {name!r} (known: {', '.join(MODELS)})")
    if isinstance(model, NoContention) or coord.compute is None:
        return None
    return ContentionTracker(coord, model)
