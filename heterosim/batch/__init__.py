"""Batched what-if engine: thousands of variants of one training iteration in one run (docs/batch-engine.md).

``export_program`` (heterosim/sim/program.py) makes the iteration a static program; :mod:`.engine` runs B
variants of it at once (NumPy reference driver, JAX driver); :mod:`.variants` says what a variant may change;
:mod:`.decisions` finds the variants under which a chain decision taken from the baseline run would go otherwise.
"""
from heterosim.batch.decisions import flipped
from heterosim.batch.engine import BatchResult, Params, run_jax, run_numpy
from heterosim.batch.variants import Variant, check_variant, params

__all__ = ["BatchResult", "Params", "Variant", "check_variant", "flipped", "params", "run_jax", "run_numpy"]
