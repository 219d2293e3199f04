"""Who holds each directed port, for the accelerated backend (``accel.py``).

A port's owners are ``("g", nic)`` (that NIC's closed-form partition, counted per flow), ``("n", id)``
(a message in ns-3), ``("f", piece)`` (a message in the fluid model) and ``("s", sid)`` (a fast-forwarded
partition).  A closed-form partition may share a port with another NIC's (``share_ports``) but with no
other kind of owner; :class:`PortLedger` keeps the owners, the ports where partitions of several NICs
meet, and the wire bytes that crossed each port outside ns-3."""
from __future__ import annotations

from typing import Any


class PortLedger:
    """Port -> owners, the shared ports, and the link bytes delivered outside ns-3."""

    def __init__(self) -> None:
        self.owners: dict[int, dict[Any, int]] = {}
        """Port -> owner -> flows ("g", src) / ("n", inner id) / ("f", piece) / ("s", steady id)."""
        self.shared: dict[int, int] = {}
        """Port -> number of closed-form partitions (NICs) crossing it, where more than one."""
        self.link_bytes: dict[int, float] = {}
        """Port -> wire bytes delivered outside ns-3 (closed form, fast-forwarded, replayed)."""

    def release(self, owner, ports: list[int]) -> None:
        for p in ports:
            own = self.owners[p]
            n = own[owner] - 1
            if n:
                own[owner] = n
            else:
                del own[owner]
                if not own:
                    del self.owners[p]
                if owner[0] == "g":
                    self.count_sharing(p, own)

    def count_sharing(self, p: int, own: dict) -> None:
        if len(own) < 2:  # most ports: one owner, shared by nobody
            self.shared.pop(p, None)
            return
        n = sum(1 for o in own if o[0] == "g")
        if n > 1:
            self.shared[p] = n
        else:
            self.shared.pop(p, None)

    def count_links(self, ports: list[int], wire: float) -> None:
        """``wire`` bytes that crossed ``ports`` outside ns-3 (closed form, fast-forwarded)."""
        for p in ports:
            self.link_bytes[p] = self.link_bytes.get(p, 0.0) + wire
