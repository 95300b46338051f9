"""Compiled copies of the loops a routing decision runs over every candidate, when built.

Why. Per request, admission works out each endpoint's pressure and saturation
(`policies.admission._states`), the model predicts its TTFT and TPOT
(`Estimator.predict_rows`) and slo_aware keys it into a tier (`policies.slo_aware._tiers`).
In CPython each loop costs about a µs per endpoint, so over 20 endpoints the decision was
70-86 µs on the 2-core hosts we measure on, against a 50 µs target, after everything the
interpreter allows (docs/performance.md, "The routing decision"). The same loops in C cost a
fifth to a half of that (the rest is building Python objects: rows, keys, rng draws).

What. `policies/_fast_admission.c`, `_fast_estimate.c` and `_fast_tiers.c`, and the prefix
index's lookup (`gateway/core/_fast_prefix.c`, loaded by gateway/core/prefix_index.py with
`load`): each is the loop of one Python function, written after it line for line, reading the
NamedTuples' fields by the positions configured here. The Python stays the reference: the
docstrings describe it, and each function runs it whenever its compiled copy is missing,
turned off, or given an input the copy does not take (a mapping that is not a dict).

Built by setup.py as optional extensions: `pip install` with a C compiler builds them (an
editable install puts them next to the sources; rebuild after editing a .c file with `pip
install -e .` again); without one the install still succeeds and the policies run as Python.
`SLO_GATEWAY_PURE_PYTHON=1` turns them off. tests/unit/test_compiled_paths.py holds each equal
to its Python, bit for bit, on random inputs, and fails under CI when they were not built.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from policies.base import EndpointSnapshot, EngineSignals
from policies.engine_pressure import MAX_RECOMPUTE_SHARE

PURE_PYTHON_ENV = "SLO_GATEWAY_PURE_PYTHON"


_LOADED: dict[str, bool] = {}  # every compiled module asked for: whether it is in use


def load(name: str) -> ModuleType | None:
    """The compiled module `name`, or None when it was not built or is turned off."""
    module = None
    if not os.environ.get(PURE_PYTHON_ENV):
        try:
            module = importlib.import_module(name)
        except ImportError:
            module = None
    _LOADED[name] = module is not None
    return module


def _positions(fields: tuple[str, ...], *names: str) -> tuple[int, ...]:
    return tuple(fields.index(name) for name in names)


_SNAPSHOT, _ENGINE = EndpointSnapshot._fields, EngineSignals._fields

ESTIMATE = load("policies._fast_estimate")
if ESTIMATE is not None:
    ESTIMATE.configure(
        _positions(
            _SNAPSHOT,
            "endpoint_id",
            "in_flight",
            "max_concurrency",
            "engine",
            "latency",
            "prefill_tokens",
        ),
        _positions(
            _ENGINE, "waiting", "running", "waiting_for_capacity", "age_s", "preemptions_per_s"
        ),
        MAX_RECOMPUTE_SHARE,
    )

TIERS = load("policies._fast_tiers")
if TIERS is not None:
    TIERS.configure(
        _positions(
            _SNAPSHOT,
            "endpoint_id",
            "kind",
            "in_flight",
            "max_concurrency",
            "input_price_per_1m",
            "output_price_per_1m",
            "cached_input_price_per_1m",
        )
    )

ADMISSION = load("policies._fast_admission")


def configure_admission(open_: object, reserved: object, saturated: object) -> None:
    """The admission loop's field positions and the `Saturation` members it returns (called
    by policies/admission.py, which defines them)."""
    if ADMISSION is None:
        return
    ADMISSION.configure(
        _positions(
            _SNAPSHOT, "endpoint_id", "in_flight", "in_flight_tokens", "max_concurrency", "engine"
        ),
        _positions(
            _ENGINE,
            "age_s",
            "kv_usage",
            "kv_capacity_tokens",
            "waiting_for_capacity",
            "waiting",
            "preemptions_per_s",
        ),
        (open_, reserved, saturated),
    )


def built() -> dict[str, bool]:
    """Each compiled module asked for so far, and whether it is in use: this module's three
    when it is imported, the prefix lookup once gateway/core/prefix_index.py is."""
    return dict(_LOADED)
