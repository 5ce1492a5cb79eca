"""Old home of the chain front's names, kept so that existing imports keep working.

The cross-strategy front is :mod:`remat.solver.pareto.chain` (above the registry), the front's
points and files are :mod:`remat.solver.front`, the checkpoint count is
:mod:`remat.solver.chain.checkpoints`. Nothing in remat.solver imports this module.
"""

from remat.solver.chain.checkpoints import chain_checkpoints, checkpoints_reference
from remat.solver.front import CSV_FIELDS, FRONT_FORMAT, front_rows, overhead_percent, write_front_csv, write_front_json
from remat.solver.pareto.chain import ChainFront, budget_sweep, chain_front, sweep_strategy

__all__ = [
    "CSV_FIELDS",
    "FRONT_FORMAT",
    "ChainFront",
    "budget_sweep",
    "chain_checkpoints",
    "chain_front",
    "checkpoints_reference",
    "front_rows",
    "overhead_percent",
    "sweep_strategy",
    "write_front_csv",
    "write_front_json",
]
