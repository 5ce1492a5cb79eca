"""Everything that touches torch: profiling models, replaying schedules, measuring memory."""
