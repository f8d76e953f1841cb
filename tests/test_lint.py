"""The tree is clean under ruff's lint rules and format, as configured in pyproject.toml (CI runs this test)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def ruff(*args: str) -> subprocess.CompletedProcess:
    """Run the ruff installed beside this interpreter (the test extra installs it) on the repository."""
    executable = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if executable is None:
        pytest.fail("ruff is not installed: pip install -e '.[test]' installs it")
    return subprocess.run([executable, *args], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_ruff_finds_nothing_to_lint():
    done = ruff("check", "--no-cache", ".")
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]


def test_the_tree_is_formatted():
    done = ruff("format", "--no-cache", "--check", ".")
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]


def test_every_noqa_gives_its_reason():
    """A ``# noqa: CODE`` comment says why after the code, so the next reader knows it is deliberate."""
    bare = []
    for path in [*REPO.glob("daskmeans/**/*.py"), *REPO.glob("tests/**/*.py"), *REPO.glob("docs/**/*.py")]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "# noqa" in line and 'noqa"' not in line:
                comment = line[line.index("# noqa") :]
                if not comment.partition(":")[2].strip() or len(comment.split()) < 4:
                    bare.append(f"{path.relative_to(REPO)}:{number}: {comment}")
    assert not bare, "\n".join(bare)
