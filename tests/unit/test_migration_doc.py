"""docs/migrating-from-litellm.md: every yaml block loads, the slo-gateway ones as configs."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from gateway.config.settings import parse_config

DOC = Path(__file__).parents[2] / "docs" / "migrating-from-litellm.md"


def blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.DOTALL)


def test_every_example_loads_and_ours_are_valid_configs() -> None:
    found = blocks()
    ours = [block for block in found if block.startswith("# slo-gateway")]
    theirs = [block for block in found if block.startswith("# LiteLLM")]
    assert len(ours) == 3 and len(theirs) == 3 and len(found) == 6
    for block in theirs:
        assert isinstance(yaml.safe_load(block), dict)
    for block in ours:
        parse_config(yaml.safe_load(block), "docs/migrating-from-litellm.md")
