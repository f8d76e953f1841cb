"""The README's examples, run as a user would: the Python block as a script, the command-line block in a shell."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
MAX_README_LINES = 250


def code_block(section: str, language: str) -> str:
    """The first ```language block of the README's section titled ``section``."""
    text = README.read_text()
    start = text.index(f"## {section}\n")
    end = text.find("\n## ", start + 1)
    return re.search(rf"```{language}\n(.*?)```", text[start:end], re.S).group(1)


def test_the_readme_is_short():
    assert len(README.read_text().splitlines()) <= MAX_README_LINES


def test_the_python_quickstart_runs_as_a_script(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(code_block("Quickstart (Python)", "python"))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "kmeans-50.zarr").is_dir() and (tmp_path / "blobs.zarr" / "labels").is_dir()
    inertia, n_iter = done.stdout.splitlines()[0].split()
    assert float(inertia) > 0 and int(n_iter) >= 1
    assert "Traceback" not in done.stderr


def test_the_command_line_quickstart_runs_in_a_shell(tmp_path):
    """Each line of the block runs as typed, with ``daskmeans`` taken from this interpreter's installation."""
    scripts = Path(sys.executable).parent
    environment = {key: value for key, value in os.environ.items() if key != "DASK_SCHEDULER_ADDRESS"}
    environment["PATH"] = f"{scripts}{os.pathsep}{environment.get('PATH', '')}"
    lines = [line for line in code_block("Quickstart (command line)", "bash").splitlines() if line.strip()]
    assert lines and all(shlex.split(line, comments=True)[0] == "daskmeans" for line in lines)
    for line in lines:
        done = subprocess.run(
            line, shell=True, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"{line}\n{done.stderr[-3000:]}"
    for output in ("blobs.zarr/labels", "model.zarr", "nmbatch.zarr", "blobs.zarr/predicted"):
        assert (tmp_path / output).is_dir(), output
