"""`daskmeans bench ... --algorithms vc-gmm`: the error-vs-speedup study is run and written (no timing asserted)."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner
from conftest import make_blobs

from daskmeans.bench import coreset_tradeoff
from daskmeans.bench.command import bench

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_the_study_compares_vc_gmm_with_both_baselines(cluster_client, tmp_path):
    X, _, _ = make_blobs(n=6000, d=4, k=10, spread=1.0, seed=3)
    np.save(tmp_path / "points.npy", X.astype(np.float32))
    out = tmp_path / "out"
    result = CliRunner().invoke(
        bench,
        [
            "--data",
            str(tmp_path / "points.npy"),
            "-k",
            "10",
            "--quick",
            "--algorithms",
            "vc-gmm",
            "--peers",
            "none",
            "--scheduler",
            cluster_client.scheduler.address,
            "--out",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    (json_path,) = out.glob("*-vc-gmm.json")
    record = json.loads(json_path.read_text())
    methods = [run["method"] for run in record["runs"]]
    assert methods.count("k-means++") == 1
    assert methods.count("vc-gmm") == len(coreset_tradeoff.coreset_sizes(6000, 10))
    assert methods.count("vc-gmm-previous") == methods.count("vc-gmm")  # judged beside the previous defaults
    assert methods.count("lwcs") == methods.count("uniform") == len(coreset_tradeoff.baseline_sizes(6000, 10))
    for run in record["runs"]:
        assert np.isfinite(run["error"]) and run["seconds"] > 0 and run["distances"] > 0
        if run["method"] == "vc-gmm":
            assert "lwcs_error_at_same_time" in run and "uniform_error_at_same_time" in run
    assert record["command"].startswith("daskmeans bench")
    table = json_path.with_suffix(".md").read_text()
    assert "| vc-GMM |" in table and "LWCS + k-means++" in table and "uniform sample + k-means++" in table
    assert table.count("- vc-GMM, coreset") == methods.count("vc-gmm")
    assert table.count("- defaults vs previous defaults, coreset") == methods.count("vc-gmm")
    assert "| vc-GMM, previous defaults (G = 5, plain AFK-MC2) |" in table
    assert json_path.with_suffix(".png").read_bytes()[:8] == PNG_SIGNATURE
    # only the study ran: no energy-over-time record for this workload
    assert sorted(p.name for p in out.glob("*.json")) == [json_path.name]


def test_error_at_equal_time_is_the_best_baseline_run_that_was_as_fast():
    ladder = [{"seconds": 1.0, "error": 0.3}, {"seconds": 2.0, "error": 0.1}, {"seconds": 3.0, "error": 0.2}]
    assert coreset_tradeoff.at_time(ladder, 0.5) is None
    assert coreset_tradeoff.at_time(ladder, 1.5) == 0.3
    assert coreset_tradeoff.at_time(ladder, 10.0) == 0.1
