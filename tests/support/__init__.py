"""Test harness shared by the suites: real processes on free loopback ports."""
