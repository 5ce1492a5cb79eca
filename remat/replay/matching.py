"""What the chain and the graph replay both check before they run a schedule: that it was solved
for the profile it is replayed with (the profile's sha256)."""

from __future__ import annotations

from collections.abc import Sequence

from remat.schedules import ChainProfile, GraphProfile, Op, Schedule, ScheduleError


def solved_ops(schedule: Schedule | Sequence[Op], profile: ChainProfile | GraphProfile | None) -> Sequence[Op]:
    """The ops of ``schedule`` (a :class:`Schedule` or a raw op list, returned as is); a
    :class:`Schedule` solved for another profile than ``profile`` is refused (no check without a
    profile)."""
    if not isinstance(schedule, Schedule):
        return schedule
    if profile is not None and schedule.profile_sha256 != profile.sha256:
        raise ScheduleError(
            f"schedule was solved for profile '{schedule.profile}' (sha256 {schedule.profile_sha256[:12]}...),"
            f" not for '{profile.name}' (sha256 {profile.sha256[:12]}...)"
        )
    return schedule.ops


__all__ = ["solved_ops"]
