"""Missed runs: fire times no delivery claimed.

audit.py     every fire time of a route in a window, against the store
backfill.py  dispatching chosen fire times through the same runner as a delivery
"""
