"""runonce: an idempotent proxy between Cloud Scheduler / Cloud Tasks and Google Cloud APIs.

One downstream execution per scheduled run: the caller is authenticated, the run is claimed in a
store with a lease, and a stable `run_id` is forwarded to the target as its idempotency handle.
"""

__version__ = "0.2.0.dev0"
