"""Fluid islands of the accelerated backend (``accel.py``, ``collisions: fluid``): messages that would
collide go to the fluid DCQCN model (:class:`netbackend.ns3.fluid.FluidSide`) instead of ns-3; their
connections' state is read from the model, and their tails come back to closed form once their ports are
theirs alone (:meth:`FluidIslands.migrate`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from netbackend.base import Completion, Message
from netbackend.ns3.closed_form import Flow, Group, Trajectory

if TYPE_CHECKING:
    from netbackend.ns3.accel import AcceleratedNs3Backend


class FluidIslands:
    """The pieces of messages the fluid model carries (``side`` None: ``collisions: packet``)."""

    def __init__(self, backend: AcceleratedNs3Backend, topology, seed: int):
        self.b = backend
        config = backend.config
        self.side = None
        if config.acceleration.collisions == "fluid":
            from netbackend.ns3.fluid import FluidSide

            # (another run number, another draw of the model's sampled CNPs: NetworkConfig.rng_run)
            self.side = FluidSide(backend.paths.router, config, seed + config.rng_run - 1, backend.paths.delay_ns,
                                  topology, backend.inner.port_links)
        self.of: dict[int, tuple[int, list[int], Any, int]] = {}
        """Piece id (a message's bytes posted to the fluid model, like an inner id) -> (message id, ports,
        connection, payload bytes posted) while the fluid model carries it."""
        self.by_src: dict[str, list[int]] = {}
        """NIC -> its pieces in the fluid model, in posting order."""
        self.left: set[int] = set()
        """Pieces whose tail left the fluid model (migrate); it still delivers their head."""
        self.cands: set[str] = set()
        """NICs to try migrating after the current deliveries."""

    def post(self, orig: int, msg: Message, size: int, t: int, ports: list[int]) -> str:
        """Give ``size`` bytes of ``msg`` (message ``orig``) to the fluid model as a piece of its own at ``t``."""
        key = self.b.paths.conn_key(msg)
        piece = next(self.b.packet.next_id)
        step = msg.step_bytes if 0 < msg.step_bytes < size else size
        self.side.post(key, piece, msg.src, ports, self.b.paths.wire(size, msg.step_bytes)[0], t,
                       step_wire_bytes=self.b.paths.wire(step, 0)[0],
                       credits=self.b.paths.max_steps if msg.connection >= 0 else 0, payload_bytes=size)
        self.of[piece] = (orig, ports, key, size)
        self.by_src.setdefault(msg.src, []).append(piece)
        for p in ports:
            self.b.ledger.owners.setdefault(p, {})[("f", piece)] = 1
        self.b.counts["bytes_fluid"] += size
        return "messages_fluid"

    def rx_bytes(self, msg: Message) -> tuple[int, bool]:
        """(bytes of ``msg`` delivered so far, whether the model carries a piece of it): what came before the
        piece went closed form (sent, a pipeline early), then the piece's whole packets past the receiver."""
        for piece in self.by_src.get(msg.src, ()):
            orig, _, _, size = self.of[piece]
            if orig == msg.id:
                return msg.size_bytes - size + self.side.delivered_payload(piece), True
        return 0, False

    def state(self, msg: Message, key) -> list[Trajectory] | None:
        """As :meth:`PacketSide.conn_state`, from the fluid model's QP: None while it has bytes, CNPs or a cut
        check pending there (the next message joins it in the model)."""
        v = self.side.idle_state(key, self.b.now_ns)
        if v is None or v[15] >= 0:
            return None
        return self.trajectory(v, self.b.paths.ports(msg), self.b.now_ns)

    def trajectory(self, v: list[float], ports: list[int], t: int) -> list[Trajectory] | None:
        """The increase-timer trajectory of a fluid QP's saved DCQCN state (DcqcnRp::Save at ``t``);
        None with a byte counter below line rate (it would need the bytes the QP sends)."""
        line = self.b.paths.router.link_rate_gbps[ports[0]] * 1e9
        ai, hai, fast, interval, bc = self.side.trajectory_params(line)
        if bc > 0 and not (v[0] >= line and v[1] >= line):
            return None
        return [Trajectory(v[0], v[1], int(v[3]), t + v[14] if v[14] >= 0 else -1.0, line, ai, hai, fast, interval)]

    def done(self, piece: int, fin: int) -> Completion | None:
        """The fluid model delivered a message: free its ports; its connection's DCQCN state now
        lives in the model (dirty: PacketSide.conn_state follows it from there).  The NICs left alone on
        ports it shared may carry on in closed form (migrate)."""
        orig, ports, key, _ = self.of.pop(piece)
        src = self.b.msgs[orig].src
        self.by_src[src].remove(piece)
        if piece in self.left:
            self.left.discard(piece)  # its ports were released when its tail left
        else:
            self.b.ledger.release(("f", piece), ports)
            if self.b.packet.migrate_on:
                self.cands.add(src)
                for p in ports:
                    for o in self.b.ledger.owners.get(p, ()):
                        if o[0] == "f":
                            self.cands.add(self.b.msgs[self.of[o[1]][0]].src)
        self.b.packet.dirty.add(key)
        return self.b.part_done(orig, fin)

    def migrate(self, src: str) -> None:
        """Move the unsent bytes of ``src``'s fluid messages into closed form, as PacketSide.migrate does for
        ns-3: when every port they cross carries only them, no queue is left there, and no CNP,
        mark or cut check is in flight for their connections, nothing can slow them but their NIC
        and their DCQCN increase timers.  Each keeps in the model the packets it has started."""
        if src in self.b.parts.groups:
            return
        mids = [m for m in self.by_src.get(src, ()) if m not in self.left]
        if not mids:
            return
        mine = {("f", m) for m in mids}
        ports_all: set[int] = set()
        for m in mids:  # the Python-side conditions first: the model's are dearer to read
            _, ports, key, _ = self.of[m]
            if key[0] == "m":
                return
            for p in ports:
                if not self.b.ledger.owners.get(p, {}).keys() <= mine:
                    return
            ports_all.update(ports[1:])
        if not all(self.side.quiet(self.of[m][2]) for m in mids):
            return
        if self.side.queued_over(ports_all, 2 * (self.b.paths.mtu + self.b.paths.hdr)):
            return
        t = self.b.now_ns
        states: dict[Any, list[Trajectory]] = {}
        for m in mids:
            _, ports, key, _ = self.of[m]
            if key not in states:
                st = self.trajectory(self.side.state(key, t), ports, t)
                if st is None:
                    return
                states[key] = st
        tails = []
        for key in states:
            for mid, kept, removed, sent in self.side.trim(key):
                if removed > 0:
                    tails.append((mid, kept, sent))
        if not tails:
            return
        self.b.counts["migrations"] += 1
        g = self.b.parts.groups[src] = Group(src, self.b.paths.router.link_rate_gbps[self.of[tails[0][0]][1][0]] / 8.0,
                                       float(t))
        self.b.counts["partitions_closed_form"] += 1
        pkt = self.b.paths.mtu + self.b.paths.hdr
        for piece, kept, sent in sorted(tails, key=lambda x: self.by_src[src].index(x[0])):
            orig, ports, key, size = self.of[piece]
            msg = self.b.msgs[orig]
            kept_payload = min(size, round(kept / pkt) * self.b.paths.mtu)
            removed = size - kept_payload
            self.b.ledger.release(("f", piece), ports)
            if kept_payload > 0:
                self.left.add(piece)
                self.b.pieces[orig] = self.b.pieces.get(orig, 1) + 1
            else:  # nothing of it was sent: it leaves the model whole
                del self.of[piece]
                self.by_src[src].remove(piece)
                self.side.forget(piece)
            self.b.counts["bytes_fluid"] -= removed
            self.b.counts["bytes_migrated"] += removed
            lead = max(0.0, kept - sent)
            wire, last, prev = self.b.paths.wire(removed, msg.step_bytes)
            f = Flow(msg, ports, wire + lead, wire + lead, self.b.paths.tail_ns(ports, last, prev), payload=removed,
                      lead_wire=lead)
            self.b.parts.add_flow(g, key, f, states[key], t)
        self.b.parts.rerate(g, float(t))
