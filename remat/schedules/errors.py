"""Errors remat raises for bad input. Each carries a one-line message meant for the user.

The bottom of remat: this module imports nothing of remat. The size text its messages print
(:func:`format_size`) is defined here for that reason; :mod:`remat.schedules.units` re-exports it
beside :func:`~remat.schedules.units.parse_size`.
"""

from __future__ import annotations


def format_size(size: float) -> str:
    """Human-readable binary size of ``size`` bytes, e.g. ``1.50 GiB``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if abs(value) < 1024 or unit == "EiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


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
