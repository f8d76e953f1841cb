"""The command line on object storage (a real S3 HTTP server, moto): make-data, info, fit (input, model, labels and
checkpoint on S3) and predict with ``--storage-option`` only, in a process without any AWS setting; credentials from
the environment instead; bad options, an existing output, a missing bucket and an unreachable store refused in one
line before any work."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import daskmeans
from daskmeans import cli
from daskmeans.datasets import make_blobs_zarr

N_SAMPLES, N_FEATURES, N_CLUSTERS, CHUNK_ROWS = 3_000, 4, 3, 1_000


def clean_environment(extra=None):
    """This environment without AWS settings or a scheduler address (plus ``extra``)."""
    kept = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "DASK_SCHEDULER"))}
    return {**kept, **(extra or {})}


def option_arguments(s3_server) -> list[str]:
    options = s3_server.storage_options()
    return [
        "--storage-option",
        f"endpoint_url={options['endpoint_url']}",
        "--storage-option",
        f"key={options['key']}",
        "--storage-option",
        f"secret={options['secret']}",
    ]


def run_module(*args, env=None, timeout=300):
    """``python -m daskmeans ARGS --json`` in a subprocess; its JSON summary."""
    done = subprocess.run(
        [sys.executable, "-m", "daskmeans", *map(str, args), "--json"],
        capture_output=True,
        text=True,
        env=env if env is not None else clean_environment(),
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    return json.loads(done.stdout.strip().splitlines()[-1])


def invoke(*args):
    """The command in this process, without any AWS setting."""
    unset = {name: None for name in os.environ if name.startswith("AWS_")}
    runner = CliRunner(env={"DASK_SCHEDULER_ADDRESS": None, **unset})
    return runner.invoke(cli.main, [str(a) for a in args], catch_exceptions=True)


def assert_one_line_error(result, *fragments):
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    message = result.output.strip()
    assert "Traceback" not in message and len(message.splitlines()) == 1, message
    for fragment in fragments:
        assert fragment in message, message


@pytest.fixture(scope="module")
def blobs(s3_server):
    """Blobs written to S3 by ``make_blobs_zarr`` with storage options, in a bucket of the module."""
    bucket = s3_server.new_bucket()
    url = make_blobs_zarr(
        f"{bucket}/blobs.zarr",
        N_SAMPLES,
        N_FEATURES,
        N_CLUSTERS,
        chunk_rows=CHUNK_ROWS,
        random_state=1,
        storage_options=s3_server.storage_options(),
    )
    return bucket, url


@pytest.mark.slow
def test_make_data_writes_to_s3(s3_server, s3_bucket, tmp_path):
    url = f"{s3_bucket}/made.zarr"
    summary = run_module(
        "make-data", url, "--n-samples", N_SAMPLES, "--n-features", N_FEATURES, "-k", N_CLUSTERS,
        "--chunk-rows", CHUNK_ROWS, "--seed", 1, *option_arguments(s3_server),
    )  # fmt: skip
    assert summary["out"] == url and summary["chunks"] == [CHUNK_ROWS, N_FEATURES]
    group = zarr.open_group(store=url, mode="r", storage_options=s3_server.storage_options())
    assert group["X"].shape == (N_SAMPLES, N_FEATURES) and group["y"].shape == (N_SAMPLES,)
    local = make_blobs_zarr(
        tmp_path / "blobs.zarr", N_SAMPLES, N_FEATURES, N_CLUSTERS, chunk_rows=CHUNK_ROWS, random_state=1
    )
    np.testing.assert_array_equal(group["X"][...], zarr.open_group(local, mode="r")["X"][...])


def test_info_describes_a_store_on_s3(s3_server, blobs):
    _, url = blobs
    details = run_module("info", url, *option_arguments(s3_server))
    assert details["kind"] == "data" and details["stored_bytes"] is None
    assert {item["name"]: item["shape"] for item in details["arrays"]}["X"] == [N_SAMPLES, N_FEATURES]


def test_credentials_from_the_environment_still_work(s3_server, blobs):
    _, url = blobs
    details = run_module("info", url, "--array", "X", env=clean_environment(s3_server.environment()))
    assert details["arrays"][0]["shape"] == [N_SAMPLES, N_FEATURES]


@pytest.mark.slow
def test_fit_and_predict_with_every_store_on_s3(s3_server, blobs):
    bucket, url = blobs
    options = s3_server.storage_options()
    model, labels, checkpoint = f"{bucket}/model.zarr", f"{url}/labels", f"{bucket}/run.ckpt"
    common = ["--local-workers", "scheduler", *option_arguments(s3_server)]
    fitted = run_module(
        "fit", url, "--array", "X", "-k", N_CLUSTERS, "--seed", 0, "--quiet", "--out", model, "--labels", labels,
        "--checkpoint", checkpoint, *common,
    )  # fmt: skip
    assert fitted["model"] == model and fitted["labels"] == labels and fitted["checkpoint"] == checkpoint
    loaded = daskmeans.load(model, storage_options=options)
    fs = s3_server.filesystem()
    assert fs.exists(f"{checkpoint}/CURRENT")
    assert run_module("info", model, *option_arguments(s3_server))["kind"] == "model"

    predicted = f"{bucket}/predicted.zarr"
    run_module("predict", model, url, "--array", "X", "--labels", predicted, *common)
    written = zarr.open_array(store=predicted, mode="r", storage_options=options)[...]
    np.testing.assert_array_equal(written, zarr.open_array(store=labels, mode="r", storage_options=options)[...])
    data = zarr.open_group(store=url, mode="r", storage_options=options)["X"][...]
    np.testing.assert_array_equal(written, loaded.predict(data))

    # the same fit again: its outputs exist, refused before any work; the checkpoint gives the same model
    again = invoke(
        "fit", url, "--array", "X", "-k", N_CLUSTERS, "--seed", 0, "--quiet", "--out", model, *common
    )  # fmt: skip
    assert_one_line_error(again, "--out", "exists already", "--overwrite")


@pytest.fixture
def small_input(tmp_path):
    """A local .npy input of a few rows."""
    path = tmp_path / "small.npy"
    np.save(path, np.random.default_rng(0).random((20, 2)))
    return str(path)


def test_storage_option_needs_key_and_value(s3_bucket):
    url = f"{s3_bucket}/blobs.zarr"
    assert_one_line_error(invoke("info", url, "--storage-option", "foo"), "--storage-option 'foo' is not NAME=VALUE")
    assert_one_line_error(
        invoke("info", url, "--storage-option", "anon=true", "--storage-option", "anon=false"), "given twice"
    )


def test_the_help_says_where_the_options_apply():
    for command in ("fit", "predict", "info", "make-data"):
        result = CliRunner().invoke(cli.main, [command, "--help"], terminal_width=200)
        assert result.exit_code == 0
        text = " ".join(result.output.split())
        assert "--storage-option KEY=VALUE" in text and "every store the command reads or writes" in text


def test_a_missing_bucket_is_said_before_any_work(s3_server, small_input):
    result = invoke(
        "fit", small_input, "-k", 2, "--local-workers", "scheduler", "--out", "s3://no-such-bucket-x2/m.zarr",
        *option_arguments(s3_server),
    )  # fmt: skip
    assert_one_line_error(result, "bucket 'no-such-bucket-x2'", "does not exist")
    assert_one_line_error(
        invoke("info", "s3://no-such-bucket-x2/data.zarr", *option_arguments(s3_server)), "does not exist"
    )


def test_an_unreachable_store_is_said_in_one_line(s3_bucket):
    result = invoke(
        "info", f"{s3_bucket}/blobs.zarr", "--storage-option", "endpoint_url=http://127.0.0.1:9",
        "--storage-option", "key=testing", "--storage-option", "secret=testing",
    )  # fmt: skip
    assert_one_line_error(result, "Cannot reach the object store", "endpoint_url")


def test_an_existing_s3_output_is_refused_before_writing(s3_server, s3_bucket, small_input):
    options = s3_server.storage_options()
    url = f"{s3_bucket}/existing.zarr"
    zarr.open_group(store=url, mode="w", storage_options=options).create_array("X", shape=(5, 2), dtype="f4")
    made = invoke("make-data", url, "--n-samples", 10, "--n-features", 2, "-k", 2, *option_arguments(s3_server))
    assert_one_line_error(made, "exists already")
    fitted = invoke(
        "fit", small_input, "-k", 2, "--local-workers", "scheduler", "--out", url, *option_arguments(s3_server)
    )  # fmt: skip
    assert_one_line_error(fitted, "--out", "exists already", "--overwrite")
    assert zarr.open_group(store=url, mode="r", storage_options=options)["X"].shape == (5, 2)


def test_info_says_when_nothing_or_a_part_is_there(s3_server, s3_bucket):
    s3_server.filesystem().pipe_file(f"{s3_bucket}/partial.zarr/X/c/0/0", b"chunk")  # no root metadata
    assert_one_line_error(
        invoke("info", f"{s3_bucket}/partial.zarr", *option_arguments(s3_server)), "was not completely written"
    )
    assert_one_line_error(invoke("info", f"{s3_bucket}/nothing.zarr", *option_arguments(s3_server)), "Nothing at")


def test_an_s3_output_another_run_is_writing_is_refused_with_that_reason(s3_server, s3_bucket, small_input):
    from daskmeans.storage.publish import CLAIM_NAME, UNFINISHED_OUTPUT

    url = f"{s3_bucket}/being-written.zarr"
    fs = s3_server.filesystem()
    claim = f"{url.removeprefix('s3://')}/{CLAIM_NAME}"
    fs.pipe_file(claim, b'{"token": "another run"}')
    fitted = invoke(
        "fit", small_input, "-k", 2, "--local-workers", "scheduler", "--labels", url, *option_arguments(s3_server)
    )  # fmt: skip
    assert_one_line_error(fitted, "--labels", f"exists already ({UNFINISHED_OUTPUT})", "--overwrite")
    fs.invalidate_cache()
    assert fs.cat_file(claim) == b'{"token": "another run"}'  # the other run's claim is left as it was
