"""Shared state: see base.py for the contract."""
