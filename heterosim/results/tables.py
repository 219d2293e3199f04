"""Per-op and per-message tables (``output.tables``), CSV or Parquet, for pandas/duckdb.

They are written only when asked (``ops``: the op table; ``all``: also the message
table): at 1,000+ GPUs they have millions of rows. Large tables go to Parquet when
pyarrow is installed (the ``parquet`` extra) and ``output.table_format`` is auto.
"""
from __future__ import annotations

import csv

from heterosim.errors import UserError

PARQUET_MIN_ROWS = 200_000
"""``table_format: auto`` writes Parquet above this many rows (a CSV of 200k rows is ~20 MB; Parquet
is ~10x smaller and typed); below it CSV, which every tool opens."""

OPS_COLUMNS = ["lane", "ranks", "stage", "op_id", "name", "kind", "stream", "phase", "microbatch", "layer",
               "collective", "comm_kind", "bytes", "flops", "start_ns", "end_ns"]
MESSAGE_COLUMNS = ["id", "src_rank", "dst_rank", "src_ep", "dst_ep", "bytes", "link", "collective", "comm_kind",
                   "start_ns", "end_ns"]


def format_cell(v) -> str:
    """A table cell for humans: '-' for missing, 4 significant digits for floats."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _have_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def table_format(fmt: str, rows: int, file: str | None = None) -> str:
    """'csv' or 'parquet' for a table of ``rows`` rows under ``output.table_format``."""
    if fmt == "parquet":
        if not _have_pyarrow():
            raise UserError("Parquet tables need pyarrow: pip install 'heterosim[parquet]'", file=file,
                            field="output.table_format", value=fmt)
        return "parquet"
    if fmt == "auto" and rows > PARQUET_MIN_ROWS and _have_pyarrow():
        return "parquet"
    return "csv"


def _ops_rows(sim, ir):
    for lane in sim.lanes:
        prog = sim.programs[lane.program]
        ranks = " ".join(map(str, lane.ranks))
        stage = ir.program_of(lane.ranks[0]).stage
        for oid, op in enumerate(prog.ops):
            yield [lane.id, ranks, stage, oid, op.name, op.kind, op.stream, op.phase, op.microbatch,
                   op.layer, op.collective, op.comm_kind, op.size_bytes, op.flops,
                   lane.start_ns[oid], lane.end_ns[oid]]


def _message_rows(sim):
    for m in sim.messages:
        yield [m.id, m.src, m.dst, m.src_ep, m.dst_ep, m.size_bytes, m.link, m.collective, m.comm_kind,
               m.start_ns, m.end_ns]


def ops_rows_count(sim) -> int:
    return sum(len(sim.programs[l.program].ops) for l in sim.lanes)


def write_ops_table(directory, sim, ir, fmt: str = "csv") -> str:
    """ops.csv or ops.parquet in ``directory``; returns the file name."""
    kind = table_format(fmt, ops_rows_count(sim))
    return _write(directory, "ops", OPS_COLUMNS, _ops_rows(sim, ir), kind)


def write_messages_table(directory, sim, fmt: str = "csv") -> str:
    kind = table_format(fmt, len(sim.messages))
    return _write(directory, "messages", MESSAGE_COLUMNS, _message_rows(sim), kind)


def check_tables(output, file: str | None = None) -> None:
    """Before anything is written: Parquet asked for without pyarrow is a one-line error."""
    if output.tables != "summary":
        table_format(output.table_format, 0, file)


def write_tables(directory, output, sim, ir) -> None:
    """The per-op and per-message tables ``output.tables`` asks for (``ir`` labels the ops' stages)."""
    if output.tables in ("ops", "all"):
        write_ops_table(directory, sim, ir, output.table_format)
    if output.tables == "all":
        write_messages_table(directory, sim, output.table_format)


def _write(directory, stem: str, columns: list[str], rows, kind: str) -> str:
    from pathlib import Path

    if kind == "csv":
        name = f"{stem}.csv"
        with open(Path(directory) / name, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(columns)
            w.writerows(rows)
        return name
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = f"{stem}.parquet"
    writer = None
    batch: list[list] = []
    try:
        for row in rows:
            batch.append(row)
            if len(batch) >= 500_000:
                writer = _flush(pa, pq, writer, Path(directory) / name, columns, batch)
                batch = []
        if batch or writer is None:
            writer = _flush(pa, pq, writer, Path(directory) / name, columns, batch)
    finally:
        if writer is not None:
            writer.close()
    return name


def _flush(pa, pq, writer, path, columns, batch):
    cols = list(zip(*batch)) if batch else [[] for _ in columns]
    table = pa.table({c: list(v) for c, v in zip(columns, cols)})
    if writer is None:
        writer = pq.ParquetWriter(path, table.schema)
    writer.write_table(table)
    return writer


# the names the rest of the code used before output.tables
def write_ops_csv(path, sim, ir) -> None:
    from pathlib import Path

    p = Path(path)
    _write(p.parent, p.stem, OPS_COLUMNS, _ops_rows(sim, ir), "csv")


def write_messages_csv(path, sim) -> None:
    from pathlib import Path

    p = Path(path)
    _write(p.parent, p.stem, MESSAGE_COLUMNS, _message_rows(sim), "csv")
