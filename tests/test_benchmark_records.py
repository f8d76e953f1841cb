"""The committed benchmark records agree with the suite that makes them, and everything shown from them (the
benchmarks page, each record's report, the README's headline table) is rendered from them by the bench's code.

No benchmark runs here: these tests read ``docs/benchmarks``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from daskmeans.bench import coreset_tradeoff, kernel_quality, report, sizing, sweep
from daskmeans.bench.command import bench, suite_command
from daskmeans.bench.page import render_page
from daskmeans.bench.records import entry_records, headline_table
from daskmeans.bench.suite import PAGE_NAME, SUITE, entry_arguments

REPO = Path(__file__).resolve().parents[1]
ROOT = "docs/benchmarks"
RECORDS = REPO / ROOT
HEADLINE_START = "<!-- headline-table:start -->"
HEADLINE_END = "<!-- headline-table:end -->"
#: The most the documentation tree may hold.
DOCS_LIMIT_BYTES = 15 * 2**20
#: Folders of docs/ that a build or the notebooks' copy make (ignored by git).
BUILT = {"_build", "_notebooks", "generated"}
RENDERERS = {
    "energy": report.markdown_table,
    "sweep": sweep.markdown_table,
    "quality": kernel_quality.markdown_table,
    "vc-gmm": coreset_tradeoff.markdown_table,
    "sizing": sizing.markdown_table,
}


@pytest.mark.parametrize("entry", SUITE, ids=[entry.name for entry in SUITE])
def test_every_entry_has_its_records_and_each_prints_the_suites_command(entry):
    found = entry_records(str(RECORDS), entry)
    assert [name for name, _ in found] == entry.record_names(), f"missing records of {entry.name}"
    command = suite_command(entry)
    for name, record in found:
        assert record["command"] == command, name
        assert f"--out {ROOT}/{entry.name}" in command
        assert "/tmp" not in command
        report_text = (RECORDS / entry.name / f"{name}.md").read_text()
        assert f"Regenerate with: `{command}`." in report_text
        assert re.fullmatch(r"[0-9a-f]{7,40}", record["commit"]), name
        assert f"Made at the code of `{record['commit']}`" in report_text
        if entry.kind == "energy":
            assert record["reference"]["method"] == entry.yardstick
            assert ("--reference best" in command) == (entry.yardstick == "best")
            if entry.yardstick == "best":
                assert "the older yardstick (--reference best)" in report_text


@pytest.mark.parametrize("entry", SUITE, ids=[entry.name for entry in SUITE])
def test_each_report_and_its_plots_are_rebuilt_from_the_json_alone(entry):
    for name, record in entry_records(str(RECORDS), entry):
        assert (RECORDS / entry.name / f"{name}.md").read_text() == RENDERERS[entry.kind](record)
        plots = sorted(path.name for path in (RECORDS / entry.name).glob(f"{name}*.png"))
        assert len(plots) == len(entry.plots()) <= 2


def test_the_committed_page_is_what_the_records_render():
    assert (RECORDS / PAGE_NAME).read_text() == render_page(str(RECORDS), out=ROOT), (
        "docs/benchmarks/index.md is out of date: rebuild it with "
        "python -c \"from daskmeans.bench.page import write_page; write_page('docs/benchmarks')\""
    )


def test_the_readme_headline_table_is_read_from_the_descriptors_record(monkeypatch):
    """README.md holds ``headline_table()`` between its markers (the lead puts it there)."""
    monkeypatch.chdir(REPO)
    text = (REPO / "README.md").read_text()
    assert HEADLINE_START in text and HEADLINE_END in text, "README.md lacks the headline table's markers"
    between = text.split(HEADLINE_START, 1)[1].split(HEADLINE_END, 1)[0]
    assert between.strip() == headline_table(ROOT).strip()


def test_the_headline_names_the_fastest_daskmeans_algorithm_and_every_peer(monkeypatch):
    monkeypatch.chdir(REPO)
    table = headline_table(ROOT)
    ((_, record),) = entry_records(ROOT, next(e for e in SUITE if e.name == "descriptors"))
    labels = [a["label"] for a in record["summary"]["algorithms"].values() if a["kind"] == "peer"]
    assert all(f"| {label} |" in table for label in labels)
    assert sum(line.startswith("| daskmeans ") for line in table.splitlines()) == 1
    assert "sooner than the fastest peer" in table or "behind the fastest peer" in table
    assert f"({ROOT}/descriptors/descriptors.md)" in table


def test_the_papers_claims_are_read_from_the_records():
    page = (RECORDS / PAGE_NAME).read_text()
    claims = page.split("## The papers' claims against our figures", 1)[1].split("\n## ", 1)[0]
    for paper in ("Zhao et al.", "Newling & Fleuret", "Hirschberger, Forster & Lücke", "Jourdan & Schwartzman"):
        assert paper in claims
    # VRKM++'s ratios hold both runs to the same 0.1% of the reference's final energy, seed by seed
    assert "MNIST 1.38x, 1.32x, 0.73x; KDD not reached, 0.37x, 1.08x" in claims


def test_the_suite_command_rebuilds_each_entry_as_the_bench_parses_it():
    """An entry's arguments (full and quick) are accepted by ``daskmeans bench``; the quick variant keeps each
    workload's small size and budget."""
    for entry in SUITE:
        for quick in (False, True):
            args = entry_arguments(entry, ROOT, quick=quick, data_dir="../shared/data")
            with bench.make_context("bench", args) as ctx:
                assert ctx.params["quick"] is quick
                if quick:
                    assert ctx.params["k"] is None and ctx.params["n_samples"] is None
                    assert ctx.params["time_budget"] is None and ctx.params["seeds"] == 1


def test_docs_stay_small_and_no_record_path_names_a_round_of_work():
    total = 0
    for folder, dirs, files in os.walk(REPO / "docs"):
        dirs[:] = [d for d in dirs if d not in BUILT]
        total += sum(os.path.getsize(os.path.join(folder, f)) for f in files)
    assert total < DOCS_LIMIT_BYTES, f"docs/ holds {total / 2**20:.1f} MiB"
    for path in RECORDS.rglob("*"):
        name = path.relative_to(RECORDS).as_posix()
        assert not re.search(r"-s\d+\b|\brun\d|\b[0-9a-f]{7,40}\b", name), name
    cache = json.loads((RECORDS / "reference-energies.json").read_text())
    assert cache["schema"] == "daskmeans-bench-reference/1" and cache["entries"]
