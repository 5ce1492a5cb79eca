"""Strategies that turn (profile, budget) into a schedule. Never imports torch."""

from remat.solver.common import SolverBug, Strategy, make_schedule
from remat.solver.registry import STRATEGIES, get_strategy, solve, strategy_names

__all__ = ["STRATEGIES", "SolverBug", "Strategy", "get_strategy", "make_schedule", "solve", "strategy_names"]
