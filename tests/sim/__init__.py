"""Deterministic simulation of runonce as users run it (issue 10): several instances sharing one
store, Cloud Scheduler's and Cloud Tasks' retries, skewed clocks, and faults at every boundary, in
virtual time. Anchors: FoundationDB's simulation testing (one seed -> one history) and Jepsen's
history checking (invariants over what every party saw). See `world.py`; run `python -m tests.sim`."""
