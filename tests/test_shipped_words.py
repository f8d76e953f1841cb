"""The shipped tree speaks of the library alone: no development history in what a user reads or installs.

Shipped files (the README, the changelog, ``docs/``, the package, the notebooks, the deployment files) must not
speak of numbered development sessions, ``-sNN`` names, ad hoc runs or issues: that history lives in git. Words
with a meaning of their own stay allowed: "a Dask session", k-means|| "rounds", "round(x)".
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: What is shipped: a file, or a folder whose text files are read. A path that does not exist is skipped.
SHIPPED = ("README.md", "CHANGELOG.md", "docs", "daskmeans", "notebooks", "deploy")

#: Folders never read: build outputs and caches.
SKIPPED_FOLDERS = {"_build", "__pycache__", ".ipynb_checkpoints", ".pytest_cache"}

#: Text files by suffix (everything else, such as images, is not read); files named ``Dockerfile*`` too.
TEXT_SUFFIXES = {
    ".md",
    ".rst",
    ".py",
    ".txt",
    ".json",
    ".jsonl",
    ".cff",
    ".ipynb",
    ".yaml",
    ".yml",
    ".toml",
    ".cfg",
    ".csv",
    ".ini",
    ".sh",
    ".dockerignore",
    ".html",
    ".css",
    ".js",
}

#: Development-history words in text: what each pattern catches.
HISTORY_WORDS = {
    "a numbered development session": re.compile(r"\bsessions?[ -]?\d+", re.IGNORECASE),
    "a development session": re.compile(
        r"\b(this|that|previous|earlier|later|last|next|same) sessions?\b", re.IGNORECASE
    ),
    "an -sNN name": re.compile(r"-s\d{2}\b"),
    "an (sNN) mark": re.compile(r"\(s\d{2}\)"),
    "ad hoc": re.compile(r"\bad[- ]hoc\b", re.IGNORECASE),
    "the issue": re.compile(r"\bthe issue\b", re.IGNORECASE),
    "an issue number": re.compile(r"\bissues?[ -]#?\d+", re.IGNORECASE),
}

#: Development-history marks in path names (of files and folders).
HISTORY_NAMES = {
    "an -sNN name": re.compile(r"-s\d{2}(?![0-9])"),
    "a session": re.compile(r"session", re.IGNORECASE),
    "ad hoc": re.compile(r"ad[-_ ]?hoc", re.IGNORECASE),
    "an issue number": re.compile(r"issue[-_ ]?\d+", re.IGNORECASE),
}


def shipped_paths(root: Path = ROOT):
    """Every file and folder under the shipped paths that exist, build outputs and caches left out."""
    for name in SHIPPED:
        top = root / name
        if not top.exists():
            continue
        if top.is_file():
            yield top
            continue
        for path in sorted(top.rglob("*")):
            if SKIPPED_FOLDERS.isdisjoint(path.relative_to(root).parts):
                yield path


def is_text(path: Path) -> bool:
    return path.is_file() and (path.suffix.lower() in TEXT_SUFFIXES or path.name.startswith("Dockerfile"))


def offending_lines(path: Path):
    """``file:line: what: the line`` for every line of ``path`` that speaks of development history."""
    text = path.read_text(encoding="utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), start=1):
        for what, pattern in HISTORY_WORDS.items():
            if pattern.search(line):
                yield f"{path.relative_to(ROOT)}:{number}: {what}: {line.strip()[:160]}"


def offending_names(paths):
    for path in paths:
        for what, pattern in HISTORY_NAMES.items():
            if pattern.search(path.name):
                yield f"{path.relative_to(ROOT)}: {what} in the name"


@pytest.mark.parametrize("name", SHIPPED)
def test_no_development_history_in_shipped_text(name):
    if not (ROOT / name).exists():
        pytest.skip(f"{name} does not exist")
    files = [path for path in shipped_paths() if is_text(path) and path.relative_to(ROOT).parts[0] == name]
    found = [line for path in files for line in offending_lines(path)]
    assert not found, f"{len(found)} line(s) speak of development history:\n" + "\n".join(found)


def test_no_development_history_in_shipped_path_names():
    found = list(offending_names(shipped_paths()))
    assert not found, f"{len(found)} path(s) are named after development history:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line, flagged",
    [
        ("measured in session 15", True),
        ("sessions 36-38 rewrote it", True),
        ("as the previous session found", True),
        ("see kmeans-s12/report.md", True),
        ("an ad hoc script", True),
        ("an ad-hoc run", True),
        ("the issue asks for it", True),
        ("issue 55 says so", True),
        ("fixed in (s32)", True),
        ("a Dask session starts", False),
        ("k-means|| runs 5 rounds", False),
        ("round(x, 2) and round 3 of k-means||", False),
        ("dask-gateway issues certificates", False),
        ("float32 values, -s for short", False),
    ],
)
def test_the_patterns_flag_history_and_nothing_else(line, flagged):
    assert any(pattern.search(line) for pattern in HISTORY_WORDS.values()) is flagged
