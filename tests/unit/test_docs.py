"""The docs guide: docs/README.md indexes every doc, and no doc or module points outside the
repository (a reader of the repo has no other tree, and no one else has this machine)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# An absolute path into a home, a workspace or a checkout, or a tree beside the repository's.
OUTSIDE = re.compile(r"(?<![\w.])(/work/|/root/|/home/\w|\.\./shared/|shared/reference/)")


def test_the_docs_index_links_every_doc() -> None:
    index = (ROOT / "docs" / "README.md").read_text()
    linked = set(re.findall(r"\]\(([\w-]+\.md)\)", index))
    docs = {path.name for path in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert docs - linked == set(), "docs/README.md must link every doc"
    assert linked - docs == set(), "docs/README.md links a doc that is not there"


def test_no_tracked_file_names_a_path_outside_the_repository() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "*.py", "*.md", "*.yaml", "*.yml", "*.toml", "*.sh", "Dockerfile"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = [
        f"{name}:{number}: {line.strip()}"
        for name in tracked
        if name != "tests/unit/test_docs.py"
        for number, line in enumerate((ROOT / name).read_text().splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert found == []
