"""Fronts across strategies (``remat pareto``): every strategy of a profile's kind solved over
budgets, for chains (:mod:`remat.solver.pareto.chain`) and graphs (:mod:`remat.solver.pareto.graph`).

These sit above the registry: they look strategies up by name, and no strategy imports them.
"""
