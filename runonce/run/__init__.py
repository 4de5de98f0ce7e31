"""The run: what happens to one delivery between its authentication and its answer.

delivery.py    headers + body -> Delivery, its run_id and body digest
runner.py      Runner: claim -> reconcile -> dispatch -> finish, the protocol every dispatch follows
guarantees.py  lateness and overlap, decided before dispatching
admission.py   a route's concurrent-dispatch limit and the SIGTERM drain
"""
