"""``remat.checkpoint(model, example_inputs, budget=...)`` and the model it returns (docs/models.md):
the front door (``entry.py``), what it accepts (``inputs.py``), the wrapped model (``model.py``)
and its cuts per input shape (``shapes.py``)."""

from remat.api.entry import checkpoint
from remat.api.inputs import resolve_budget
from remat.api.model import RematModel, ShapePlan
from remat.api.shapes import ShapeCut, Signature

__all__ = ["RematModel", "ShapeCut", "ShapePlan", "Signature", "checkpoint", "resolve_budget"]
