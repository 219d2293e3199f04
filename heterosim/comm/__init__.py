"""Communication planning: collectives on rank groups -> per-rank flow schedules.

``plan_collective(op, ranks, size_bytes, system)`` gives a :class:`FlowSchedule`
(see ``heterosim/comm/schedule.py`` for the contract the coordinator runs);
``intra_time_ns`` times a single-node schedule analytically.
"""
from heterosim.comm.intranode import LINK_EFFICIENCY, busbw_GBps, intra_time_ns
from heterosim.comm.planner import (ALGORITHMS, OPS, PROTOCOLS, choose_algorithm, choose_protocol,
                                    plan_collective, ring_order)
from heterosim.comm.schedule import NVSWITCH, FlowSchedule, Transfer

__all__ = ["plan_collective", "choose_algorithm", "choose_protocol", "ring_order", "intra_time_ns",
           "busbw_GBps", "LINK_EFFICIENCY", "FlowSchedule", "Transfer", "NVSWITCH", "OPS", "ALGORITHMS",
           "PROTOCOLS"]
