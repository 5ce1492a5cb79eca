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

    ``min_budget`` (bytes), when known, is what ``bound`` says it is: ``"exact"`` the smallest
    budget this strategy can meet; ``"at least"`` a proven lower bound on it (the strategy may
    need more); ``"found"`` a budget it is known to meet (the smallest may be less). The message
    says which, so it is never a false "smallest".
    """

    def __init__(self, strategy: str, budget: int, min_budget: int | None, detail: str = "", bound: str = "exact"):
        from remat.schedules.units import format_size

        if bound not in ("exact", "at least", "found"):
            raise ValueError(f"bound must be 'exact', 'at least' or 'found', got {bound!r}")
        self.strategy = strategy
        self.budget = budget
        self.min_budget = min_budget
        self.bound = bound
        message = f"strategy '{strategy}' cannot fit a budget of {format_size(budget)} ({budget} bytes)"
        if min_budget is not None:
            size = f"{format_size(min_budget)} ({min_budget} bytes)"
            message += {
                "exact": f"; the smallest budget it can meet is {size}",
                "at least": f"; it needs at least {size} (a lower bound, not necessarily enough)",
                "found": f"; it meets {size} (the smallest budget it can meet may be less)",
            }[bound]
        if detail:
            message += f" ({detail})"
        super().__init__(message)
