"""Errors remat raises for bad input. Each carries a one-line message meant for the user."""

from __future__ import annotations


class RematError(Exception):
    """Base class: the message is a complete one-line explanation for the user."""


class ProfileError(RematError):
    """A profile (chain or graph) or a JSON file is malformed; the message names the field."""


class ScheduleError(RematError):
    """A schedule is invalid for its profile; the message names the op index and the item."""


class InfeasibleBudgetError(RematError):
    """No schedule of a strategy fits the budget.

    ``min_budget`` is the smallest budget (bytes) this strategy can meet, when known.
    """

    def __init__(self, strategy: str, budget: int, min_budget: int | None, detail: str = ""):
        from remat.schedules.units import format_size

        self.strategy = strategy
        self.budget = budget
        self.min_budget = min_budget
        message = f"strategy '{strategy}' cannot fit a budget of {format_size(budget)} ({budget} bytes)"
        if min_budget is not None:
            message += f"; the smallest budget it can meet is {format_size(min_budget)} ({min_budget} bytes)"
        if detail:
            message += f" ({detail})"
        super().__init__(message)
