"""``daskmeans warm``: compile the kernels ahead of the first fit."""

from __future__ import annotations

from dataclasses import asdict

import click

from .. import config
from .common import emit

#: The default of ``--dtypes`` (:data:`daskmeans.warm.INPUT_DTYPES`, without importing it: ``--help`` starts at once).
INPUT_DTYPES = ("float32", "float64", "uint8")


@click.command("warm", short_help="Compile the kernels now, so that no fit compiles inside its max_time.")
@click.option(
    "--scheduler",
    envvar="DASK_SCHEDULER_ADDRESS",
    metavar="ADDRESS",
    help="Also warm the workers of this Dask scheduler (tcp://host:port; default $DASK_SCHEDULER_ADDRESS).",
)
@click.option(
    "--connect-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=lambda: config.CONNECT_TIMEOUT_SECONDS,
    show_default="the setting CONNECT_TIMEOUT_SECONDS",
    help="Seconds to wait for --scheduler before giving up.",
)
@click.option(
    "--dtypes",
    metavar="DTYPE,...",
    default=",".join(INPUT_DTYPES),
    show_default=True,
    help="The dtypes the data comes in, as stored (kernels read integer and float16 rows as they are stored, so "
    "each such dtype takes kernels of its own).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout instead of text.")
def warm(scheduler, connect_timeout, dtypes, as_json):
    """Compile every daskmeans kernel into Numba's on-disk cache (or check that it is there), by running small fits
    of every algorithm in this process, and warm the kernels of the workers of --scheduler.

    Run it once after installing or upgrading daskmeans (a container image runs it when it is built): the kernels
    are then loaded from the cache, and the first fit of a process no longer spends seconds compiling inside its
    max_time. Numba's cache holds code for the CPU it was compiled on; run it where the fits run."""
    from ..engine.client import connect
    from ..warm import check_dtypes, warm_up

    dtypes = check_dtypes([name.strip() for name in dtypes.split(",") if name.strip()])
    client = connect(scheduler, timeout=connect_timeout) if scheduler else None
    try:
        report = warm_up(client, dtypes)
    finally:
        if client is not None:
            client.close()
    emit(asdict(report), as_json, [f"daskmeans warm: {report.summary()}"])
