"""Background (non-training) traffic: Poisson flow arrivals with sizes from a CDF.

Shared clusters carry other tenants' traffic; its effect on collectives (queues,
PFC pauses, CC reactions) is what this models. The generator follows the HPCC
study's ``traffic_gen``: each host starts flows as a Poisson process whose mean
rate gives ``load`` x its link rate in payload, sizes are drawn from an
empirical CDF (linear interpolation), destinations uniformly among the other
hosts.

:class:`WithBackground` wraps any backend: it injects the background flows as
simulated time advances, in their own id space (``BACKGROUND_ID_OFFSET`` and up),
swallows their completions and reports their FCTs in ``stats().extra``, so the
coordinator sees only its own messages.
"""
from __future__ import annotations

import bisect
import heapq
import math
import random
from pathlib import Path
from typing import Iterator

from netbackend.base import Completion, Message, NetStats, NetworkBackend
from netbackend.config import BackgroundConfig
from hscommon.errors import UserError

DATA_DIR = Path(__file__).parent / "data"
BUILTIN_CDFS = {"websearch": DATA_DIR / "websearch.txt", "fb-hadoop": DATA_DIR / "fb-hadoop.txt"}
"""Public flow-size distributions (sources: data/SOURCES.md)."""

BACKGROUND_ID_OFFSET = 1 << 40
"""Background message ids start here; training messages count up from 1."""


class FlowSizeCdf:
    """An empirical flow-size CDF, sampled by inverse transform with linear interpolation."""

    def __init__(self, points: list[tuple[float, float]], source: str = "<cdf>"):
        if len(points) < 2:
            raise UserError("a flow-size CDF needs at least two points", file=source)
        sizes = [float(s) for s, _ in points]
        pcts = [float(p) for _, p in points]
        if any(b < a for a, b in zip(sizes, sizes[1:])) or any(b < a for a, b in zip(pcts, pcts[1:])):
            raise UserError("sizes and percentiles must be non-decreasing", file=source)
        if pcts[-1] != 100.0 or pcts[0] < 0 or sizes[0] < 0:
            raise UserError("the last percentile must be 100 and values non-negative", file=source,
                            value=(sizes[-1], pcts[-1]))
        if sizes[-1] <= 0:  # a zero mean would make the Poisson arrival rate infinite
            raise UserError("the largest flow size must be > 0 bytes", file=source, value=sizes[-1])
        if pcts[0] > 0:  # mass below the first point sits at that size
            sizes.insert(0, sizes[0])
            pcts.insert(0, 0.0)
        self.sizes, self.pcts, self.source = sizes, pcts, source

    @classmethod
    def from_file(cls, path: str | Path) -> "FlowSizeCdf":
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as err:
            raise UserError(f"cannot read flow-size CDF: {err.strerror}", file=str(path)) from None
        points = []
        for n, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            try:
                if len(parts) != 2:
                    raise ValueError
                points.append((float(parts[0]), float(parts[1])))
            except ValueError:
                raise UserError("expected 'size_bytes cdf_percent'", file=f"{path}:{n}", value=line) from None
        return cls(points, str(path))

    def quantile(self, u: float) -> float:
        """Size at CDF fraction ``u`` in [0, 1] (linear between points)."""
        p = min(max(u, 0.0), 1.0) * 100.0
        i = bisect.bisect_left(self.pcts, p)
        if i == 0:
            return self.sizes[0]
        p0, p1 = self.pcts[i - 1], self.pcts[i]
        s0, s1 = self.sizes[i - 1], self.sizes[i]
        return s1 if p1 == p0 else s0 + (s1 - s0) * (p - p0) / (p1 - p0)

    def sample(self, rng: random.Random) -> int:
        return max(1, int(round(self.quantile(rng.random()))))

    @property
    def mean_bytes(self) -> float:
        """Mean of the piecewise-linear distribution (uniform within each segment)."""
        return sum((p1 - p0) / 100.0 * (s0 + s1) / 2.0 for s0, s1, p0, p1 in
                   zip(self.sizes, self.sizes[1:], self.pcts, self.pcts[1:]))


def load_cdf(name_or_path: str | Path) -> FlowSizeCdf:
    """A built-in distribution by name, or a CDF file."""
    path = BUILTIN_CDFS.get(str(name_or_path), Path(name_or_path))
    if not Path(path).exists():
        raise UserError(f"unknown flow-size CDF (built-in: {', '.join(BUILTIN_CDFS)}; or a file path)",
                        field="network.background.cdf", value=str(name_or_path))
    return FlowSizeCdf.from_file(path)


class BackgroundTraffic:
    """Poisson flow arrivals per host; iterating yields :class:`Message` s in start order.

    Each iteration restarts from the seed, so the same object gives the same flows.
    """

    def __init__(self, cdf_path: str | Path | FlowSizeCdf, load: float, hosts: list[str],
                 host_rate_gbps: float | dict[str, float], seed: int = 0, start_ns: int = 0,
                 end_ns: int | None = None, id_offset: int = BACKGROUND_ID_OFFSET):
        self.cdf = cdf_path if isinstance(cdf_path, FlowSizeCdf) else load_cdf(cdf_path)
        if not 0 < load <= 1:
            raise UserError("background load must be in (0, 1]", field="network.background.load", value=load)
        hosts = list(dict.fromkeys(hosts))
        if len(hosts) < 2:
            raise UserError("background traffic needs at least two hosts", field="network.background.hosts",
                            value=hosts)
        rates = host_rate_gbps if isinstance(host_rate_gbps, dict) else {h: float(host_rate_gbps) for h in hosts}
        missing = [h for h in hosts if rates.get(h, 0) <= 0]
        if missing:
            raise UserError("no positive line rate for background host", field="network.background.hosts",
                            value=missing[0])
        self.load, self.hosts, self.seed = load, hosts, seed
        self.start_ns, self.end_ns, self.id_offset = int(start_ns), end_ns, id_offset
        mean = self.cdf.mean_bytes
        # flows per ns = load * rate (bits/ns) / (8 * mean bytes)
        self.rate_per_ns = {h: load * rates[h] / (8.0 * mean) for h in hosts}

    @property
    def mean_interarrival_ns(self) -> float:
        """Across all hosts together."""
        return 1.0 / sum(self.rate_per_ns.values())

    def __iter__(self) -> Iterator[Message]:
        rng = random.Random(self.seed)
        heap = []
        for i, h in enumerate(self.hosts):
            heap.append((self.start_ns + rng.expovariate(self.rate_per_ns[h]), i))
        heapq.heapify(heap)
        n = len(self.hosts)
        k = 0
        while heap:
            t, i = heapq.heappop(heap)
            t_ns = int(math.ceil(t))
            if self.end_ns is not None and t_ns > self.end_ns:
                continue  # this host is done; others may still have arrivals before end_ns
            j = rng.randrange(n - 1)
            dst = self.hosts[j + 1 if j >= i else j]
            yield Message(self.id_offset + k, self.hosts[i], dst, self.cdf.sample(rng), t_ns,
                          flow_key=rng.getrandbits(32))
            k += 1
            heapq.heappush(heap, (t + rng.expovariate(self.rate_per_ns[self.hosts[i]]), i))

    @classmethod
    def from_config(cls, cfg: BackgroundConfig, topology, seed: int = 0) -> "BackgroundTraffic":
        hosts = cfg.hosts if cfg.hosts is not None else list(topology.hosts)
        unknown = [h for h in hosts if not topology.is_host(h)]
        if unknown:
            raise UserError("not a host of the fabric", field="network.background.hosts", value=unknown[0])
        linked = [h for h in hosts if topology.host_rate_gbps.get(h, 0) > 0]
        return cls(cfg.cdf, cfg.load, linked, topology.host_rate_gbps, seed=seed + cfg.seed_offset,
                   start_ns=cfg.start_ns, end_ns=cfg.end_ns)


class WithBackground(NetworkBackend):
    """A backend plus background flows: the caller sees only its own messages.

    Background flows are handed to the inner backend up to ``lookahead_ns`` of
    simulated time ahead (so a packet-level backend is not stopped at every
    arrival); their completions are recorded and not returned.
    """

    def __init__(self, inner: NetworkBackend, traffic: BackgroundTraffic | None, lookahead_ns: int = 100_000):
        super().__init__(inner.topology, inner.config, inner.seed)
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]
        self.traffic = traffic
        self.offset = traffic.id_offset if traffic is not None else BACKGROUND_ID_OFFSET
        self.lookahead_ns = int(lookahead_ns)
        self._it = iter(traffic) if traffic is not None else iter(())
        self._next: Message | None = next(self._it, None)
        self._bg_inflight: dict[int, Message] = {}
        self._bg_done: list[tuple[int, int, int, str, str]] = []
        """(size_bytes, start_ns, finish_ns, src, dst) per completed background flow."""
        self._bg_started = 0
        self._bg_size: dict[int, int] = {}

    @property
    def now_ns(self) -> int:
        return self.inner.now_ns

    def send(self, msg: Message) -> None:
        if msg.id >= self.offset:
            raise UserError(f"message ids from {self.offset} up are reserved for background traffic",
                            field="message.id", value=msg.id)
        self.inner.send(msg)

    def pending(self) -> int:
        return self.inner.pending() - len(self._bg_inflight)

    def _inject(self, horizon_ns: int) -> None:
        now = self.inner.now_ns
        while self._next is not None and self._next.start_ns <= horizon_ns:
            m = self._next
            if m.start_ns < now:
                m = Message(m.id, m.src, m.dst, m.size_bytes, now, m.flow_key)
            self.inner.send(m)
            self._bg_inflight[m.id] = m
            self._bg_size[m.id] = m.size_bytes
            self._bg_started += 1
            self._next = next(self._it, None)

    def advance(self, until_ns: int | None = None) -> list[Completion]:
        while True:
            self._inject(self.inner.now_ns + self.lookahead_ns)
            if until_ns is None and self.pending() == 0:
                return []
            nxt = self._next.start_ns if self._next is not None else None
            bound = nxt if until_ns is None else (until_ns if nxt is None else min(until_ns, nxt))
            comps = self.inner.advance(bound)
            mine = []
            for c in comps:
                m = self._bg_inflight.pop(c.id, None)
                if m is None:
                    mine.append(c)
                else:
                    self._bg_done.append((m.size_bytes, m.start_ns, c.finish_ns, m.src, m.dst))
            if mine:
                return mine
            if until_ns is not None and self.inner.now_ns >= until_ns:
                return []
            if not comps and bound is None:
                return []  # inner backend idle

    def background_fct(self) -> list[tuple[int, int, int, str, str]]:
        return list(self._bg_done)

    def stats(self) -> NetStats:
        st = self.inner.stats()
        bg_ids = {i for i in st.fct_ns if i >= self.offset}
        bg_bytes = sum(self._bg_size[i] for i in bg_ids if i in self._bg_size)
        fct = {i: v for i, v in st.fct_ns.items() if i not in bg_ids}
        durations = sorted(f - s for _, s, f, _, _ in self._bg_done)
        extra = dict(st.extra)
        extra["background"] = {
            "flows_started": self._bg_started,
            "flows_completed": len(self._bg_done),
            "flows_in_flight": len(self._bg_inflight),
            "bytes_completed": sum(d[0] for d in self._bg_done),
            "offered_load": self.traffic.load if self.traffic is not None else 0.0,
            "fct_ns_p50": _pct(durations, 0.50),
            "fct_ns_p99": _pct(durations, 0.99),
            "flows": [list(d) for d in self._bg_done],
            "flows_are": "[size_bytes, start_ns, finish_ns, src, dst]",
        }
        return NetStats(messages=st.messages - len(bg_ids), bytes_delivered=st.bytes_delivered - bg_bytes,
                        fct_ns=fct, link_bytes=st.link_bytes, extra=extra)

    def close(self) -> None:
        self.inner.close()


def with_background(inner: NetworkBackend, cfg: BackgroundConfig | None, seed: int = 0) -> NetworkBackend:
    """``inner`` unchanged when ``cfg`` is None, else wrapped with the configured traffic."""
    if cfg is None:
        return inner
    return WithBackground(inner, BackgroundTraffic.from_config(cfg, inner.topology, seed))


def _pct(sorted_vals: list[int], q: float) -> int | None:
    if not sorted_vals:
        return None
    return sorted_vals[min(len(sorted_vals) - 1, int(q * len(sorted_vals)))]
