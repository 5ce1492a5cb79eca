"""The data model: profiles, schedules, their JSON files, validation and the simulator.

Depends on nothing else in remat (and never on torch).
"""

from remat.schedules.errors import InfeasibleBudgetError, ProfileError, RematError, ScheduleError
from remat.schedules.io import (
    load_profile,
    load_schedule,
    profile_from_dict,
    read_json,
    save_profile,
    save_schedule,
    write_json,
)
from remat.schedules.profiles import (
    CHAIN_FORMAT,
    GRAPH_FORMAT,
    ChainProfile,
    GraphNode,
    GraphProfile,
    Profile,
    Stage,
    StageOption,
)
from remat.schedules.schedule import SCHEDULE_FORMAT, Op, Prediction, Schedule, parse_ops
from remat.schedules.simulator import (
    OpRecord,
    SimulationResult,
    check_schedule,
    simulate,
    simulate_chain,
    simulate_graph,
)
from remat.schedules.units import format_size, parse_size

__all__ = [
    "CHAIN_FORMAT",
    "GRAPH_FORMAT",
    "SCHEDULE_FORMAT",
    "ChainProfile",
    "GraphNode",
    "GraphProfile",
    "InfeasibleBudgetError",
    "Op",
    "OpRecord",
    "Prediction",
    "Profile",
    "ProfileError",
    "RematError",
    "Schedule",
    "ScheduleError",
    "SimulationResult",
    "Stage",
    "StageOption",
    "check_schedule",
    "format_size",
    "load_profile",
    "load_schedule",
    "parse_ops",
    "parse_size",
    "profile_from_dict",
    "read_json",
    "save_profile",
    "save_schedule",
    "simulate",
    "simulate_chain",
    "simulate_graph",
    "write_json",
]
