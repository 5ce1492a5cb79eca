"""Memory/compute fronts of a chain across strategies: the ``optimal`` DP's whole front plus every
other chain strategy swept over budgets (``remat pareto`` on a chain).

Above the registry (it solves strategies by name); no strategy imports it. No matplotlib here
(the plot is :func:`remat.plots.plot_front`). Units: bytes and milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tqdm import tqdm

from remat.schedules import ChainProfile, InfeasibleBudgetError, RematError
from remat.solver.chain import chen_greedy, recompute_all
from remat.solver.chain.checkpoints import chain_checkpoints
from remat.solver.chain.dp import blocked
from remat.solver.chain.optimal import minimum_budget, optimal_front
from remat.solver.chain.store_all import store_all_peak
from remat.solver.front import FrontPoint
from remat.solver.registry import get_strategy, solve, strategy_names


def budget_sweep(low: int, high: int, count: int) -> list[int]:
    """``count`` budgets (bytes) spaced geometrically from ``low`` to ``high`` inclusive."""
    low = max(1, int(low))
    high = max(low, int(high))
    if count <= 1 or low == high:
        return [high]
    ratio = (high / low) ** (1.0 / (count - 1))
    budgets = sorted({min(high, int(round(low * ratio**i))) for i in range(count)} | {high})
    return budgets


def sweep_strategy(
    profile: ChainProfile, strategy: str, budgets: Sequence[int], progress: bool = False
) -> list[FrontPoint]:
    """Solve ``profile`` with ``strategy`` at each budget; infeasible budgets are skipped and
    repeated schedules (same peak and time) kept once, at the smallest budget.

    A strategy that can say which schedule a budget gets without building it (``choose``) is
    solved only at the budgets whose schedule is new: each distinct schedule is built and
    simulated once (budgets are visited in increasing order, so the smallest budget is kept)."""
    choose = get_strategy(strategy, "chain").choose
    seen: set = set()

    iterator: Iterable[int] = budgets
    if progress:
        iterator = tqdm(budgets, desc=strategy, unit="budget", leave=False, disable=None)
    points: dict[tuple[int, float], FrontPoint] = {}
    for budget in iterator if choose is None else sorted(iterator):
        if choose is not None:
            key = choose(profile, budget)
            if key is None or key in seen:
                continue
            seen.add(key)
        try:
            schedule = solve(profile, budget, strategy)
        except InfeasibleBudgetError:
            continue
        predicted = schedule.predicted
        key = (predicted.peak_memory, round(predicted.compute_ms, 9))
        if key in points:
            continue
        points[key] = FrontPoint(
            strategy=strategy,
            budget=int(budget),
            peak_memory=predicted.peak_memory,
            compute_ms=predicted.compute_ms,
            recompute_ms=predicted.recompute_ms,
            checkpoints=chain_checkpoints(schedule.ops),
        )
    return sorted(points.values(), key=lambda p: (p.peak_memory, p.compute_ms))


@dataclass(frozen=True)
class ChainFront:
    """Everything ``remat pareto`` shows for a chain.

    Attributes:
        profile: the chain.
        points: optimal front points first (sorted by peak), then each baseline's points.
        store_all_ms: step time without recomputation, ms.
        forward_ms: time of one forward pass over the chain, ms (the √n regime's overhead).
        left_out: (strategy, the one-line reason) for each asked-for strategy that does not
            scale to this chain's length and was left out (see :func:`length_refusals`).
    """

    profile: ChainProfile
    points: tuple[FrontPoint, ...]
    store_all_ms: float
    forward_ms: float
    left_out: tuple[tuple[str, str], ...] = ()

    def by_strategy(self) -> dict[str, list[FrontPoint]]:
        grouped: dict[str, list[FrontPoint]] = {}
        for point in self.points:
            grouped.setdefault(point.strategy, []).append(point)
        return grouped

    def marks(self) -> dict[str, FrontPoint]:
        """The optimal front's store-all, minimum-memory and √n points (√n: the least memory
        whose recomputation is at most one extra forward pass, Chen et al.'s regime)."""
        optimal = [p for p in self.points if p.strategy == "optimal"]
        if not optimal:
            return {}
        marks = {"minimum memory": min(optimal, key=lambda p: p.peak_memory)}
        marks["store-all"] = max(optimal, key=lambda p: (p.peak_memory, -p.compute_ms))
        within = [p for p in optimal if p.recompute_ms <= self.forward_ms * (1 + 1e-9)]
        if within:
            marks["√n (≤ 1 extra forward)"] = min(within, key=lambda p: p.peak_memory)
        return marks


_LENGTH_CHECKS = {
    "recompute-all": recompute_all.check_length,
    "chen-greedy": chen_greedy.check_length,
    "optimal": lambda profile: (
        blocked.check_long(profile, blocked.block_size(profile.length)) if profile.length > blocked.FLAT_LIMIT else None
    ),
}


def length_refusals(profile: ChainProfile, strategies: Sequence[str]) -> dict[str, str]:
    """The strategies among ``strategies`` that refuse a chain this long, with their one-line reasons."""
    refused = {}
    for name in strategies:
        check = _LENGTH_CHECKS.get(name)
        if check is None:
            continue
        try:
            check(profile)
        except RematError as error:
            refused[name] = str(error)
    return refused


def chain_front(
    profile: ChainProfile,
    strategies: Sequence[str],
    slots: int = 500,
    points: int = 24,
    progress: bool = False,
    while_waiting: Callable[[], object] | None = None,
) -> ChainFront:
    """The DP's front (if ``optimal`` is among ``strategies``) and every other strategy solved at
    ``points`` budgets between the smallest peak any front reaches and the store-all peak.

    ``while_waiting`` is called once the baselines are swept, while the DP's tables may still be
    filling (the CLI imports matplotlib there). A strategy that refuses a chain this long (its
    schedules or its search would not fit bounded memory) is left out, with its reason in
    ``left_out``; if every asked-for strategy refuses, that is the error."""
    known = strategy_names("chain")
    for name in strategies:
        if name not in known:
            raise RematError(f"--strategies: unknown chain strategy '{name}' (available: {', '.join(known)})")
    refused = length_refusals(profile, strategies)
    if refused and len(refused) == len(set(strategies)):
        raise RematError(next(iter(refused.values())))
    strategies = [name for name in strategies if name not in refused]
    # the front's least memory is the exact minimum: the sweep's budgets need not wait for the front
    low = minimum_budget(profile, slots=slots) if "optimal" in strategies else profile.input_size
    budgets = budget_sweep(max(profile.input_size, low // 2), store_all_peak(profile), points)
    baselines = [name for name in strategies if name != "optimal"]
    collected: list[FrontPoint] = []
    # the DP's tables are filled in threads that release the GIL: the baselines are swept
    # meanwhile, with their progress bars only (the DP's would interleave with them)
    background = "optimal" in strategies and (bool(baselines) or not progress)
    with ThreadPoolExecutor(max_workers=1) as pool:
        dp = pool.submit(optimal_front, profile, slots) if background else None
        if "optimal" in strategies and dp is None:
            collected.extend(optimal_front(profile, slots=slots, progress=progress))
        swept = [point for name in baselines for point in sweep_strategy(profile, name, budgets, progress=progress)]
        if while_waiting is not None:
            while_waiting()
        if dp is not None:
            collected.extend(dp.result())
    collected.extend(swept)
    forward = sum(stage.forward_ms for stage in profile.stages)
    left_out = tuple(refused.items())
    return ChainFront(profile, tuple(collected), profile.store_all_compute_ms, forward, left_out)
