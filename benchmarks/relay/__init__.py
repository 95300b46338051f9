"""Relay overhead benchmark: what slo-gateway adds over a bare relay, direct and LiteLLM.

Run `python -m benchmarks.relay [--quick]`; docs/performance.md explains the figures.
"""
