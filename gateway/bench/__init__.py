"""The measuring tool: TTFT/TPOT/throughput sweeps, charts, and the KV-capacity planner.

`kvcap` is pure arithmetic (the gateway reuses it); `client`, `sweep`, `report` and `charts` make
up `slo-gateway bench`; `cli.register(app)` adds both commands to the Typer app.
"""
