"""Names runonce checks, declared once as regular expressions without anchors: delivery parsing,
the routes file, the targets' resource names and the store URLs build their patterns from these.
(The deploy scripts and Terraform, which cannot import them, repeat them: tests/test_architecture.py
holds the copies to these.)"""

from __future__ import annotations

PROJECT_ID = r"[a-z][a-z0-9-]{4,28}[a-z0-9]"
"""A Google Cloud project ID: 6 to 30 lower-case letters, digits and hyphens."""
SCOPED_PROJECT_ID = rf"(?:[a-z][a-z0-9.-]{{0,62}}:)?{PROJECT_ID}"
"""A project ID, optionally domain-scoped (`example.com:my-project`)."""
PROJECT_NUMBER = r"[0-9]{1,20}"
LOCATION = r"[a-z][a-z0-9-]{0,62}"
"""A Google Cloud location (`us-central1`, `global`)."""
ROUTE_NAME = r"[a-z0-9][a-z0-9_-]{0,62}"
"""A runonce route: lower-case letters, digits, `-` and `_`, at most 63 characters (as in URLs and the run_id)."""
