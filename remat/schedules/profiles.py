"""Profiles: what the solvers and the simulator know about a network.

A :class:`ChainProfile` describes a chain of stages (the DP's world,
:mod:`remat.schedules.chain_profile`); a :class:`GraphProfile` describes the DAG of the joint
forward+backward computation (the ILP's world, :mod:`remat.schedules.graph_profile`). Both are
frozen and validated on construction (the field checks: :mod:`remat.schedules.fields`); every
error names the offending field, e.g. ``stages[3].saved_size: must be >= output_size (saved
includes the output)``.

Units everywhere: sizes in bytes (int), times in milliseconds (float).
"""

from __future__ import annotations

from remat.schedules.chain_profile import CHAIN_FORMAT, ChainProfile, Stage, StageOption
from remat.schedules.graph_profile import GRAPH_FORMAT, GraphNode, GraphProfile

Profile = ChainProfile | GraphProfile

__all__ = [
    "CHAIN_FORMAT",
    "GRAPH_FORMAT",
    "ChainProfile",
    "GraphNode",
    "GraphProfile",
    "Profile",
    "Stage",
    "StageOption",
]
