"""The modules one request passes through: the gateway's own (gateway/ and policies/, the
simulated fleet in gateway/sim left out), traced with a profile hook over a few requests after a
warm-up, in process over the relay benchmark's in-process upstream
(benchmarks/relay/instructions.py), so no HTTP library or load generator is counted.

Run: python -m benchmarks.request_modules [--stream] [--requests 5] [--list]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from benchmarks.relay.instructions import in_process_app, one_request

ROOT = Path(__file__).resolve().parents[1]
COUNTED = (ROOT / "gateway", ROOT / "policies")
LEFT_OUT = ROOT / "gateway" / "sim"


async def modules_of(requests: int, stream: bool) -> set[str]:
    """The repository's modules whose functions run while `requests` requests are served."""
    seen: set[str] = set()

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            seen.add(frame.f_code.co_filename)

    async with in_process_app(1) as app:
        for _ in range(3):
            await one_request(app, stream)
        sys.setprofile(hook)
        try:
            for _ in range(requests):
                await one_request(app, stream)
        finally:
            sys.setprofile(None)
    return {name for name in seen if _counted(Path(name))}


def _counted(path: Path) -> bool:
    inside = any(path.is_relative_to(tree) for tree in COUNTED)
    return inside and not path.is_relative_to(LEFT_OUT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--list", action="store_true", help="name each module")
    args = parser.parse_args()
    stdout, sys.stdout = sys.stdout, open(os.devnull, "w")  # the request log  # noqa: SIM115
    found = asyncio.run(modules_of(args.requests, args.stream))
    sys.stdout = stdout
    kind = "streamed" if args.stream else "non-streamed"
    print(f"{len(found)} modules of gateway/ and policies/ ran for a {kind} chat request")
    if args.list:
        for name in sorted(found):
            print(" ", Path(name).relative_to(ROOT))


if __name__ == "__main__":
    main()
