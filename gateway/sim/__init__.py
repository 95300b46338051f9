"""Simulated fleet: a vLLM replica model (`model.py`) served as an OpenAI server (`engine.py`),
a hosted provider (`provider.py`), and a fleet of both in one event loop (`fleet.py`)."""
