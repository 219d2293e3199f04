"""Work estimate before simulating, against a documented budget.

A valid but enormous scenario (100k GPUs, a million micro-batches, a million iterations) used to run
for hours and eat gigabytes before anyone saw a number. :func:`estimate` counts, cheaply, what a run
would do: op executions (the coordinator runs one *lane* per TP group), network messages (collective
instances over more than one lane times their transfers, capped as the comm planner caps them) and,
for the packet-level backend, packets. Above the budget the run stops with one line that says how
to raise it.

Budget (work units = op executions + 2 x messages (a start and a completion each) + packets/100, per
iteration, times iterations):
``DEFAULT_WORK_BUDGET``, or the environment variable ``HETEROSIM_WORK_BUDGET`` (a number, ``1e9``
allowed), or ``work_budget=`` in :func:`heterosim.api.prepare`/``simulate``/``run``.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from heterosim.errors import SimulationError, UserError

DEFAULT_WORK_BUDGET = 10_000_000
"""Work units one run may take. Measured (benchmarks/bench_budget.py): the flow backend runs ~35k events/s
on one unloaded core, and the estimate is within ~2x of the events a run really takes, so 10M units is
roughly 5-10 minutes; the 1024-GPU quickstart is ~1M units (1.24M events), a 100k-GPU one ~19M (refused
before anything is built)."""
ENV_VAR = "HETEROSIM_WORK_BUDGET"
PACKETS_PER_UNIT = 100
"""ns-3 packets cost far less than a coordinator event (C++, no Python per packet)."""
OPS_PER_LAYER_MICROBATCH = 16
"""Op executions per layer and micro-batch (forward + backward, TP collectives, SP): measured 12.8 on the
quickstart IR, 16 as an upper estimate for the pre-compile check."""


@dataclass
class WorkEstimate:
    ops: int
    """Op executions (per lane, all lanes, all iterations)."""
    messages: int
    """Network transfers of collectives across lanes and pipeline sends."""
    packets: int
    """Packets (packet-level backend only; 0 for flow)."""

    @property
    def units(self) -> int:
        return self.ops + 2 * self.messages + self.packets // PACKETS_PER_UNIT

    def describe(self) -> str:
        s = f"{self.ops:.3g} op executions, {self.messages:.3g} messages"
        return s + (f", {self.packets:.3g} packets" if self.packets else "")


def work_budget(explicit: float | None = None) -> int:
    """The budget in force: ``explicit``, else ``$HETEROSIM_WORK_BUDGET``, else the default."""
    if explicit is not None:
        value, where = explicit, "work_budget"
    else:
        text = os.environ.get(ENV_VAR)
        if text is None or not text.strip():
            return DEFAULT_WORK_BUDGET
        where = ENV_VAR
        try:
            value = float(text)
        except ValueError:
            raise UserError("not a number", field=where, value=text) from None
    if isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise UserError("must be a positive finite number", field=where, value=value)
    return int(value)


def estimate_before_compile(scenario, plan, lanes_per_stage: list[int]) -> WorkEstimate:
    """Op executions from the plan alone (no IR built): an upper estimate, so that compiling a typo
    (a million micro-batches) is refused before the compiler allocates it."""
    iters = scenario.training.iterations
    m = max(plan.microbatches)
    ops = sum(lanes * m * max(1, plan.stage_layer_count(s)) * OPS_PER_LAYER_MICROBATCH
              for s, lanes in enumerate(lanes_per_stage))
    return WorkEstimate(ops * iters, 0, 0)


def estimate(ir, scenario, backend: str, channels: int | None = None) -> WorkEstimate:
    """From the compiled IR: exact op executions, messages from the collectives' group sizes."""
    from heterosim.comm.planner import MAX_TRANSFERS

    iters = scenario.training.iterations
    mtu = max(1, scenario.network.mtu_bytes)
    tp_groups = ir.groups.get("tp") or [(r,) for r in range(ir.world_size)]
    lane_size = {r: len(g) for g in tp_groups for r in g}
    ranks_of_prog: dict[int, int] = {}
    lanes_of_prog: dict[int, float] = {}
    for r, p in enumerate(ir.rank_program):
        ranks_of_prog[p] = ranks_of_prog.get(p, 0) + 1
        lanes_of_prog[p] = lanes_of_prog.get(p, 0.0) + 1.0 / lane_size.get(r, 1)
    group_size = {name: (len(gs[0]) if gs else 1) for name, gs in ir.groups.items()}
    ops = messages = packets = 0.0
    ch = channels or 2
    for pid, prog in enumerate(ir.programs):
        lanes = lanes_of_prog.get(pid, 0.0)
        if not lanes:
            continue
        ops += lanes * len(prog.ops)
        for op in prog.ops:
            if op.kind != "comm" or op.group == "tp":
                continue
            n = group_size.get(op.group, 1) if op.group else 2
            if op.collective in ("send", "recv"):
                if op.collective == "send":
                    messages += lanes * ch
                    packets += lanes * math.ceil(op.size_bytes / mtu)
                continue
            if n < 2:
                continue
            instances = lanes / n  # one instance per group (counted once, from one lane per group)
            transfers = min(MAX_TRANSFERS, 2 * n * (n - 1) * ch)
            messages += instances * transfers
            packets += instances * 2 * (n - 1) * math.ceil(op.size_bytes / mtu)
    if backend != "ns3":
        packets = 0
    return WorkEstimate(int(ops * iters), int(messages * iters), int(packets * iters))


def check(est: WorkEstimate, budget: int, file: str | None, what: str = "the run") -> None:
    if est.units > budget:
        raise SimulationError(
            f"{what} would take about {est.units:.3g} work units ({est.describe()}), over the budget of "
            f"{budget:.3g}; make the scenario smaller, or raise the budget with {ENV_VAR}={_suggest(est.units)}",
            file=file)


def _suggest(units: int) -> str:
    exp = math.floor(math.log10(max(units, 1)))
    lead = math.ceil(units / 10 ** exp)
    return f"{lead}e{exp}" if lead < 10 else f"1e{exp + 1}"
