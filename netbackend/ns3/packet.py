"""The packet-level side of the accelerated backend (``accel.py``): the messages it gave ns-3 (through
Ns3Backend's public interface only), their completion, the DCQCN state of their connections as ns-3 has it,
and the migration of packet-level tails back to closed form once their ports are theirs alone
(:meth:`PacketSide.migrate`)."""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from netbackend.base import Completion, Message
from netbackend.ns3.closed_form import Flow, Group, Trajectory

if TYPE_CHECKING:
    from netbackend.ns3.accel import AcceleratedNs3Backend


class PacketSide:
    """Messages in ns-3 (``inner_of``) and the connections whose QPs ns-3 may have slowed (``dirty``)."""

    def __init__(self, backend: AcceleratedNs3Backend):
        self.b = backend
        self.migrate_on = backend.config.acceleration.migrate
        self.next_id = itertools.count(1)
        """Ids of the messages posted to ns-3 and of the pieces posted to the fluid model (one sequence)."""
        self.inner_of: dict[int, tuple[int, list[int], Any, int]] = {}
        """Inner id -> (message id, ports, connection key, ECN marks on its ports when posted)."""
        self.by_src: dict[str, list[int]] = {}
        """NIC -> its packet-level (inner) messages in posting order."""
        self.prefix: dict[int, tuple[int, int]] = {}
        """Message id -> (inner id, bytes done before it went to ns-3)."""
        self.migrated: set[int] = set()
        """Inner messages whose tail went to closed form (ns-3 finishes their kept request)."""
        self.candidates: set[str] = set()
        """NICs to try migrating after the current completions."""
        self.dirty: set[Any] = set()
        """Connections whose QPs may have been slowed by DCQCN (a mark on their path in ns-3)."""
        self.conns: set = set()
        """Connections that ever had a message in ns-3 (the others have fresh QPs there)."""
        self._marks_at = -1
        self._marks_vec: Any = None
        self._queue_at = -1
        self._queue_vec: list[float] = []

    def post(self, orig: int, msg: Message, size: int, t: int, ports: list[int]) -> str:
        """Give ``size`` bytes of ``msg`` (message ``orig``) to ns-3 as a message of its own at ``t``."""
        self.b.bring_inner_to(t)
        iid = next(self.next_id)
        self.b.inner.send(Message(iid, msg.src, msg.dst, size, t, msg.flow_key, msg.connection,
                                msg.step_bytes))
        self.inner_of[iid] = (orig, ports, self.b.paths.conn_key(msg), self.marks(ports))
        self.conns.add(self.b.paths.conn_key(msg))
        self.by_src.setdefault(msg.src, []).append(iid)
        self.prefix[orig] = (iid, msg.size_bytes - size)
        for p in ports:
            own = self.b.ledger.owners.setdefault(p, {})
            own[("n", iid)] = 1
        self.b.counts["bytes_packet_level"] += size
        return "messages_packet_level"


    def conn_state(self, msg: Message, busy_ok: bool = False) -> list[Trajectory] | None:
        """The DCQCN trajectories of a dirty connection's QPs read from ns-3, or None when they
        cannot be followed in closed form (data or a cut check outstanding there, or a byte
        counter, which would need the bytes the QP sends, with a rate below line)."""
        key = self.b.paths.conn_key(msg)
        if key[0] == "m" or self.b.config.cc == "none":
            return None if key[0] == "m" else []
        if self.b.islands.side is not None:
            return self.b.islands.state(msg, key)
        v = self.dcqcn_read(msg, busy_ok)
        if not v:
            return None
        line, ai, hai, fast, interval, bc = v[:6]
        out = []
        for i in range(6, len(v), 7):  # per QP: RC, RT, stages, next increase, CNP seen, alpha (rdma-nic.h)
            rate, target, tstage, _bstage, nxt = v[i:i + 5]
            tr = Trajectory(rate, target, int(tstage), nxt, line, ai, hai, int(fast), interval)
            if bc > 0 and not (rate >= line and target >= line):
                return None
            out.append(tr)
        return out

    def marks(self, ports: list[int]) -> int:
        """ECN marks so far on ``ports`` (0 without ECN: no CNP can then reach a QP).

        Read only when some mark happened since the last read (one counter, not every port)."""
        if not self.b.reacts:
            return 0
        total = self.b.inner.counter("ce_received")
        if total == 0:
            return 0
        if total != self._marks_at:
            self._marks_vec = self.b.inner.port_stat("ecn_marks")
            self._marks_at = total
        v = self._marks_vec
        return int(sum(v[p] for p in ports))

    def done(self, iid: int, fin: int) -> Completion | None:
        orig, ports, conn, marks0 = self.inner_of.pop(iid)
        self.by_src[self.b.msgs[orig].src].remove(iid)
        self.b.ff.hist.pop(iid, None)
        if iid in self.migrated:
            self.migrated.discard(iid)  # its ports were released when it migrated
        else:
            self.prefix.pop(orig, None)
            self.b.ledger.release(("n", iid), ports)
            if self.migrate_on:
                self.candidates.add(self.b.msgs[orig].src)
                for p in ports:
                    for o in self.b.ledger.owners.get(p, ()):
                        if o[0] == "n":
                            self.candidates.add(self.b.msgs[self.inner_of[o[1]][0]].src)
        if self.b.reacts and self.marks(ports) != marks0:  # a mark on its path: DCQCN may have slowed it
            self.dirty.add(conn)
        return self.b.part_done(orig, fin)

    def migrate_candidates(self) -> None:
        """After packet-level messages completed: NICs whose packet-level flows now have their
        ports to themselves carry on in closed form (see migrate)."""
        cands, self.candidates = self.candidates, set()
        if self.b.paths.qps_per_conn > 1 or self.b.paths.per_message_qp:
            return
        for src in sorted(cands):
            if self.by_src.get(src) and src not in self.b.parts.groups:
                self.migrate(src)

    def migrate(self, src: str) -> None:
        """Move the unsent tails of ``src``'s packet-level messages into closed form.

        Allowed when every port those messages cross carries only them (at packet level) and
        no closed-form flow, no switch queue on them holds more than two packets, and every
        connection's DCQCN state can be followed (no cut due): then, as for any source-bounded
        partition, no queue builds, no mark comes, and the NIC's round robin over its QPs at
        their DCQCN rates is the answer.  ns-3 keeps the work request each message is sending
        (it becomes the message's last there, so the in-flight packets finish exactly); the
        rest (whole NCCL steps) leaves ns-3 and joins the NIC's closed-form partition behind
        that kept request, whose bytes count as the NIC's time first."""
        iids = list(self.by_src[src])
        if any(i in self.migrated for i in iids):
            return
        mine = {("n", i) for i in iids}
        ports_all: set[int] = set()
        for i in iids:
            orig, ports, conn, _ = self.inner_of[i]
            if conn[0] == "m" or self.b.paths.path(ports)[0]:
                return
            for p in ports:
                for o in self.b.ledger.owners.get(p, ()):
                    if o not in mine:
                        return
            ports_all.update(ports[1:])
        if self.b.paths.router.num_hosts and ports_all:
            q = self.queue_bytes()
            if any(q[p] > 2 * (self.b.paths.mtu + self.b.paths.hdr) for p in ports_all):
                return
        states: dict[Any, list[Trajectory]] = {}
        for i in iids:
            orig, ports, conn, _ = self.inner_of[i]
            if conn not in states:
                st = self.conn_state(self.b.msgs[orig], busy_ok=True)
                if st is None:
                    return
                states[conn] = st
        tails: list[tuple[int, int, float, int, list[int], Any]] = []  # (iid, bytes, lead wire, status, ports, conn)
        blocked: set[Any] = set()
        for i in reversed(iids):  # newest first on each connection
            orig, ports, conn, _ = self.inner_of[i]
            if conn in blocked:
                continue
            m = self.b.msgs[orig]
            status, kept, removed = self.b.inner.trim_message(m.src, m.dst, m.connection, i)
            if status == 0:
                blocked.add(conn)  # its older messages are sent further still
                continue
            tails.append((i, int(removed), float(self.b.paths.wire(int(kept), 0)[0]) if kept else 0.0, int(status), ports,
                          conn))
        if not tails:
            return
        t = self.b.now_ns
        self.b.counts["migrations"] += 1
        g = self.b.parts.groups[src] = Group(src, self.b.paths.router.link_rate_gbps[tails[0][4][0]] / 8.0, float(t))
        self.b.counts["partitions_closed_form"] += 1
        for i, removed, lead, status, ports, conn in reversed(tails):  # posting order
            m = self.b.msgs[self.inner_of[i][0]]
            self.took_out(i, status, removed)
            self.b.counts["bytes_migrated"] += removed
            wire, last, prev = self.b.paths.wire(removed, m.step_bytes)
            f = Flow(m, ports, wire + lead, wire + lead, self.b.paths.tail_ns(ports, last, prev), payload=removed,
                      lead_wire=lead)
            self.b.parts.add_flow(g, conn, f, states[conn], t)
        self.b.parts.rerate(g, float(t))

    def dcqcn_read(self, msg: Message, busy_ok: bool) -> list[float]:
        """RdmaNic::ConnectionDcqcnState of ``msg``'s connection, with ns-3 brought to now."""
        self.b.bring_inner_to(self.b.now_ns)
        return self.b.inner.connection_dcqcn_state(msg.src, msg.dst, msg.connection, busy_ok)

    def dcqcn_vec(self, msg: Message, busy_ok: bool) -> list[float]:
        v = self.dcqcn_read(msg, busy_ok)
        return v if len(v) == 6 + 7 and v[5] <= 0 else []  # one QP, no byte counter

    def save_cc(self, msg: Message) -> list[float]:
        """RdmaNic::SaveConnectionCc of ``msg``'s connection (empty: none, or not one DCQCN QP)."""
        return self.b.inner.save_connection_cc(msg.src, msg.dst, msg.connection)

    def restore_cc(self, msg: Message, state: list[float]) -> bool:
        return self.b.inner.restore_connection_cc(msg.src, msg.dst, msg.connection, state)

    def took_out(self, i: int, status: int, removed: int) -> None:
        """Bookkeeping after RdmaNic::TrimMessage took ``removed`` bytes of inner message ``i`` out of
        ns-3 (status 1: ns-3 finishes the kept request, one more piece of the message; status 2: nothing
        of it was sent, it leaves ns-3 whole).  Its ports are no longer held at packet level."""
        orig, ports, _, _ = self.inner_of[i]
        self.b.ledger.release(("n", i), ports)
        if status == 2:
            del self.inner_of[i]
            self.by_src[self.b.msgs[orig].src].remove(i)
            self.b.inner.forget(i)
            self.prefix.pop(orig, None)
            self.b.ff.hist.pop(i, None)
        else:
            self.migrated.add(i)
            self.b.pieces[orig] = self.b.pieces.get(orig, 1) + 1
        self.b.counts["bytes_packet_level"] -= removed

    def queue_bytes(self) -> list[float]:
        if self._queue_at != self.b.now_ns:
            self._queue_vec = self.b.inner.port_stat("queue_bytes")
            self._queue_at = self.b.now_ns
        return self._queue_vec
