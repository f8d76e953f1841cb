"""``daskmeans bench suite``: the quick variant runs chosen entries into OUT/NAME and writes the benchmarks page;
options that belong to an entry are refused, and so are existing records (no timing is asserted)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import SHARED_DATA

from daskmeans.bench.command import bench
from daskmeans.bench.suite import PAGE_NAME, entry_named


@pytest.fixture
def scheduler(cluster_client):
    """The address of the session's LocalCluster: the suite's entries run on it."""
    return cluster_client.scheduler.address


def run_suite(*args):
    return CliRunner().invoke(bench, ["suite", *map(str, args)], catch_exceptions=False)


def read_record(folder, name):
    record = json.loads((folder / f"{name}.json").read_text())
    report = (folder / f"{name}.md").read_text()
    return record, report


@pytest.mark.slow
def test_a_quick_suite_writes_each_entrys_records_into_its_folder_and_the_page(scheduler, tmp_path):
    out = tmp_path / "bench"
    result = run_suite(
        "--quick", "--only", "sizing", "--scheduler", scheduler, "--out", out, "--work-dir", tmp_path / "data"
    )
    assert result.exit_code == 0, result.output
    record, report = read_record(out / "sizing", "sizing-quick")
    assert record["command"].startswith("daskmeans bench sizing")
    assert f"--out {out}/sizing" in record["command"] and "--quick" in record["command"]
    assert "--sizes" not in record["command"] and "--scheduler" not in record["command"]
    assert f"Regenerate with: `{record['command']}`." in report
    assert (out / "sizing" / "sizing-quick.png").read_bytes()[:4] == b"\x89PNG"
    page = (out / PAGE_NAME).read_text()
    assert page.startswith("# Benchmarks\n")
    assert f"## {entry_named('sizing').title}" in page and "(sizing/sizing-quick.md)" in page
    assert "sizing/sizing-quick\n```" in page  # the record's report is in the page's hidden toctree
    # a second run refuses to replace the records, before anything runs
    again = CliRunner().invoke(bench, ["suite", "--quick", "--only", "sizing", "--out", str(out)])
    assert again.exit_code != 0 and "--overwrite" in again.output


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED_DATA / "pendigits.npz").exists(), reason="shared datasets not present")
def test_a_quick_suite_entry_on_a_shared_dataset(scheduler, tmp_path):
    out = tmp_path / "bench"
    result = run_suite("--quick", "--only", "kernel", "--data-dir", SHARED_DATA, "--scheduler", scheduler, "--out", out)
    assert result.exit_code == 0, result.output
    for name in entry_named("kernel").record_names(quick=True):
        record, _ = read_record(out / "kernel", name)
        assert record["command"].startswith("daskmeans bench pendigits mnist") and "--quality" in record["command"]
        assert record["seeds"] == [0]
    assert "Jourdan & Schwartzman" in (out / PAGE_NAME).read_text()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seeds", "3"], "does not apply to 'daskmeans bench suite'"),
        (["--workers", "2"], "does not apply to 'daskmeans bench suite'"),
        (["--only", "nope"], "no entry 'nope'"),
        (["descriptors"], "name no workload beside it"),
    ],
)
def test_the_suite_refuses_what_belongs_to_an_entry(tmp_path, args, message):
    result = CliRunner().invoke(bench, ["suite", *args, "--out", str(tmp_path / "out")])
    assert result.exit_code != 0
    assert message in result.output
    assert not (tmp_path / "out").exists()


def test_only_belongs_to_the_suite(tmp_path):
    result = CliRunner().invoke(bench, ["synthetic", "--only", "sizing", "--out", str(tmp_path / "out")])
    assert result.exit_code != 0 and "--only picks entries of the suite" in result.output


def test_a_missing_dataset_is_named_before_any_entry_runs(tmp_path):
    result = CliRunner().invoke(
        bench, ["suite", "--only", "sizing,descriptors", "--data-dir", str(tmp_path), "--out", str(tmp_path / "out")]
    )
    assert result.exit_code != 0 and "cifar_dsift.npz" in result.output and "--data-dir" in result.output
    assert not (tmp_path / "out").exists()
