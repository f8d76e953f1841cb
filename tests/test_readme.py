"""The README's Python example, saved as a script file and run as a user would (``python example.py``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_example() -> str:
    """The first ```python block of the README's "Usage (Python)" section."""
    text = README.read_text()
    section = text[text.index("## Usage (Python)"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_usage_example_runs_as_a_script(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(python_example())
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "kmeans-50.zarr").is_dir() and (tmp_path / "blobs.zarr" / "labels").is_dir()
    inertia, n_iter = done.stdout.splitlines()[0].split()
    assert float(inertia) > 0 and int(n_iter) >= 1
    assert "Traceback" not in done.stderr
