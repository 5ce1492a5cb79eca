"""Old home of the graph front's names, kept so that existing imports keep working.

The cross-strategy front of a graph is :mod:`remat.solver.pareto.graph` (above the registry).
Nothing in remat.solver imports this module.
"""

from remat.solver.pareto.graph import TIME_LIMITED, FailedPoint, GraphFront, default_budgets, graph_front

__all__ = ["TIME_LIMITED", "FailedPoint", "GraphFront", "default_budgets", "graph_front"]
