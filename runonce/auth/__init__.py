"""Who is calling.

callers.py        the authenticators (`RUNONCE_AUTH`): a request -> a caller email, or a refusal
certs.py          Google's signing certificates, cached by their HTTP lifetime
cloud_run_iam.py  the start-up check that Cloud Run's invoker check guards the service
"""
