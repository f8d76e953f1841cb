"""What the commands share: user errors as one line or JSON, the cluster options, input and output checks,
``--param`` parsing, printing. Modules that need Dask arrays are imported by the functions that use them, so
that ``--help`` and ``info`` start at once."""

from __future__ import annotations

import ast
import contextlib
import errno
import functools
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .. import config
from ..exceptions import DaskmeansError, InputDataError, InvalidParameterError, OutputExistsError
from ..registry import estimator_class

if TYPE_CHECKING:  # for type checkers only: the commands import these when they run
    from ..storage.io import Dataset

_Command = TypeVar("_Command", bound=Callable[..., Any])

#: Errors a user causes; they end the command with a one-line message instead of a traceback (a ConnectionError:
#: an object store that cannot be reached at the address given).
USER_ERRORS = (
    DaskmeansError,
    FileNotFoundError,
    FileExistsError,
    PermissionError,
    NotADirectoryError,
    IsADirectoryError,
    ConnectionError,
)


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


class CommandError(click.ClickException):
    """A mistake of the user: one line on stderr, or one JSON object on stdout when the command has ``--json``."""

    exit_code = 1

    def __init__(self, message: str, kind: str, as_json: bool):
        super().__init__(message)
        self.kind = kind
        self.as_json = as_json

    def show(self, file: Any = None) -> None:
        if self.as_json:
            click.echo(json.dumps({"error": self.message, "type": self.kind, "exit_status": self.exit_code}))
        else:
            super().show(file)


# -- the Dask cluster the commands run on ------------------------------------------------------------------


class SettingChoice(click.Choice):
    """A choice among the values of a setting (:mod:`daskmeans.config`), read when the command runs."""

    def __init__(self, setting: str) -> None:
        self.setting = setting
        super().__init__(config.get(setting))

    @property
    def choices(self) -> tuple:
        return tuple(config.get(self.setting))

    @choices.setter
    def choices(self, value: Any) -> None:  # click.Choice sets it: the setting is read instead
        pass


def cluster_options(command: _Command) -> _Command:
    """Add ``--scheduler``, ``--connect-timeout``, ``--workers``, ``--threads-per-worker``, ``--memory-limit``,
    ``--local-workers``;
    the command receives them checked, as ``cluster=ClusterSpec(...)``."""

    @functools.wraps(command)
    def wrapper(*args, scheduler, connect_timeout, workers, threads_per_worker, memory_limit, local_workers, **kwargs):
        from ..engine.cluster import ClusterSpec

        debug = click.get_current_context().find_root().params.get("debug", False)
        spec = ClusterSpec(
            scheduler,
            connect_timeout,
            workers,
            threads_per_worker,
            memory_limit,
            local_workers,
            worker_log_level=logging.WARNING if debug else logging.CRITICAL,
        )
        return command(*args, cluster=spec.validate(), **kwargs)

    options = [
        click.option(
            "--scheduler",
            envvar="DASK_SCHEDULER_ADDRESS",
            metavar="ADDRESS",
            help="Run on this Dask scheduler (tcp://host:port; default $DASK_SCHEDULER_ADDRESS). "
            "Without it, a local cluster is started for the command: threads in this process for "
            "inputs up to 1 GiB, else worker processes.",
        ),
        click.option(
            "--connect-timeout",
            type=click.FloatRange(min=0, min_open=True),
            default=lambda: config.CONNECT_TIMEOUT_SECONDS,
            show_default="the setting CONNECT_TIMEOUT_SECONDS",
            help="Seconds to wait for --scheduler before giving up.",
        ),
        click.option("--workers", type=click.IntRange(min=1), help="Worker processes of the local cluster."),
        click.option("--threads-per-worker", type=click.IntRange(min=1), help="Threads per local worker."),
        click.option(
            "--memory-limit",
            metavar="SIZE",
            help="Memory limit per local worker: 4GiB, 0.5 (of the machine), or auto (default).",
        ),
        click.option(
            "--local-workers",
            type=SettingChoice("LOCAL_WORKERS"),
            default="auto",
            show_default=True,
            help="Workers of the local cluster: threads in this process (one worker with --workers x "
            "--threads-per-worker threads), worker processes, auto (threads for inputs up to "
            "1 GiB unless the cluster is sized, else processes), or scheduler: no cluster, Dask's "
            "threaded scheduler in this process (least overhead per pass, no dashboard).",
        ),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


# -- helpers ---------------------------------------------------------------------------------------------------


# -- object storage ----------------------------------------------------------------------------------------------

STORAGE_OPTION_HELP = (
    "An option of the object store's fsspec filesystem (repeatable), applied to every store the command reads "
    "or writes by URL (s3://, gs://, ...), e.g. --storage-option endpoint_url=http://minio:9000 "
    "--storage-option key=KEY --storage-option secret=SECRET, or anon=true; values are read like --param's. "
    "Without them the filesystem reads the environment (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, ...). The options "
    "travel with the work to the Dask workers."
)


def storage_option(command: _Command) -> _Command:
    """Add a repeatable ``--storage-option KEY=VALUE``; the command receives them as
    ``storage_options`` (a dict, or None when none is given)."""

    @functools.wraps(command)
    def wrapper(*args, storage_option_texts, **kwargs):
        return command(*args, storage_options=parse_storage_options(storage_option_texts), **kwargs)

    return click.option(
        "--storage-option",
        "storage_option_texts",
        metavar="KEY=VALUE",
        multiple=True,
        help=STORAGE_OPTION_HELP,
    )(wrapper)


def parse_storage_options(texts: tuple[str, ...]) -> dict[str, Any] | None:
    """``("endpoint_url=http://...", "anon=true")`` -> ``{"endpoint_url": "http://...", "anon": True}``; None for
    no option. Values are parsed as by :func:`parse_param`; a key given twice is an error."""
    options: dict[str, Any] = {}
    for text in texts:
        key, value = parse_param(text, option="--storage-option", example="endpoint_url=http://minio:9000")
        if key in options:
            raise InvalidParameterError(f"--storage-option {key} is given twice; give each option once.")
        options[key] = value
    return options or None


def open_data(path: str, array: str | None, storage_options: dict[str, Any] | None = None) -> Dataset:
    """Open an input (metadata only), with a clear message for a plain file that is not a data file."""
    from ..storage.io import open_input
    from ..storage.publish import is_local, local_path

    if is_local(path):
        local = local_path(path)
        if os.path.isfile(local) and not local.lower().endswith((".npy", ".npz")):
            raise InputDataError(
                f"{path!r} is a file, not a Zarr store; daskmeans reads Zarr stores (directories), .npy and .npz files."
            )
    return open_input(path, array=array, storage_options=storage_options if "://" in path else None)


def resolved(path: str) -> tuple[str, bool]:
    """A local path with symlinks and ``..`` resolved (and whether it is local); a URL as it is."""
    from ..storage.publish import is_local, local_path

    if is_local(path):
        return os.path.realpath(local_path(os.fspath(path))), True
    return os.fspath(path).rstrip("/"), False


def overlap(path: str, other: str) -> str | None:
    """How ``path`` relates to ``other`` once both are resolved: "is", "lies inside", "contains" or None."""
    (first, first_local), (second, second_local) = resolved(path), resolved(other)
    if first_local != second_local:
        return None
    if first == second:
        return "is"
    if first.startswith(second.rstrip("/") + "/"):
        return "lies inside"
    if second.startswith(first.rstrip("/") + "/"):
        return "contains"
    return None


def check_outputs(
    outputs: dict[str, str | None],
    overwrite: bool,
    inputs: dict[str, str | None],
    sizes: dict[str, int] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> None:
    """Check every output of a command before any work: writable, apart from the others and from every input,
    and room for it on its disk (an output on an object store, reached with ``storage_options``: its bucket
    exists and takes a write, and nothing is at its path unless ``overwrite``).

    An output may not be, lie inside or contain an input (the data array, a model) or another output, whatever
    symlinks or ``..`` lead there: writing it could destroy what the command reads. Labels may go beside the
    data array in its group (``data.zarr/labels`` for ``data.zarr/X``). ``sizes`` maps an option to its output's
    uncompressed size in bytes (:func:`check_free_space`); a warning for each output that may not fit goes to
    stderr.
    """
    from ..storage.publish import UNFINISHED_OUTPUT, is_local, prepare_output

    given = {option: os.fspath(path) for option, path in outputs.items() if path is not None}
    options = list(given)
    for i, first in enumerate(options):
        for second in options[i + 1 :]:
            relation = overlap(given[first], given[second])
            if relation is not None:
                raise InvalidParameterError(
                    f"{first} {given[first]!r} {relation} {second} {given[second]!r}; give them separate paths."
                )
    for option, path in given.items():
        for name, source in inputs.items():
            relation = None if source is None else overlap(path, os.fspath(source))
            if relation is not None:
                raise InvalidParameterError(
                    f"{option} {path!r} {relation} the {name} {os.fspath(source)!r}; "
                    "writing it would destroy what this command reads. Write it "
                    "somewhere else."
                )
        remote = not is_local(path)
        if remote:  # first: a store that cannot be reached or a missing bucket is said as such
            check_writable(option, path, storage_options)
        try:
            prepare_output(path, overwrite, storage_options if remote else None)
        except OutputExistsError as error:
            why = f" ({UNFINISHED_OUTPUT})" if error.unfinished else ""
            raise OutputExistsError(
                f"{option} {path!r} exists already{why}; choose another path or add --overwrite to replace it.",
                unfinished=error.unfinished,
            ) from error
        warning = check_free_space(option, path, (sizes or {}).get(option, 0))
        if not remote:
            check_writable(option, path)
        if warning:
            click.echo(f"Warning: {warning}", err=True)


def check_writable(option: str, path: str, storage_options: dict[str, Any] | None = None) -> None:
    """Refuse, before any work, an output whose folder cannot take a new entry (read-only, no permission).

    A file is created and removed there: permission bits alone do not tell (root, read-only mounts, ACLs). On an
    object store (reached with ``storage_options``) a small object is written beside the output and removed: a
    store that cannot be reached, a missing bucket or refused credentials are said before any work.
    """
    from ..storage.publish import is_local, local_path

    if not is_local(path):
        check_object_store_writable(option, path, storage_options)
        return
    folder = os.path.dirname(os.path.abspath(local_path(path)))
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".daskmeans-write-check-"):
            pass
    except OSError as error:
        raise PermissionError(
            f"{option} {path!r}: cannot write in {folder!r} ({error.strerror or error}); choose a writable place."
        ) from error


def check_object_store_writable(option: str, url: str, storage_options: dict[str, Any] | None) -> None:
    """Write and remove a small object beside the output ``url`` (``PARENT/.daskmeans-write-check-TOKEN``)."""
    import uuid

    from ..storage.remote import filesystem, missing_bucket, store_error

    fs, key = filesystem(url, storage_options)
    parent = key.rstrip("/").rsplit("/", 1)[0] if "/" in key.strip("/") else key.strip("/")
    probe = f"{parent}/.daskmeans-write-check-{uuid.uuid4().hex[:8]}"
    try:
        fs.pipe_file(probe, b"")
        fs.rm_file(probe)
    except Exception as error:
        raised = missing_bucket(url, storage_options) or store_error(url, error, storage_options, f"{option}")
        if raised is error:
            raise PermissionError(
                f"{option} {url!r}: cannot write there ({type(error).__name__}: {error}); check the URL, the "
                "bucket and the credentials' rights."
            ) from error
        raise raised from error


#: Bytes and file-system entries that any Zarr output takes whatever its compression: its folder and its
#: ``zarr.json`` (a few hundred bytes for the smallest array daskmeans writes).
OUTPUT_MINIMUM_BYTES = 256
OUTPUT_MINIMUM_ENTRIES = 2


def check_free_space(option: str, path: str, uncompressed_bytes: int) -> str | None:
    """Refuse a local output that certainly does not fit on its disk; say when it may not.

    The compressed size of an output is known only once written (labels of skewed clusters compress far more
    than labels of even ones), so the check refuses only what cannot fit whatever the compression: fewer free
    bytes than :data:`OUTPUT_MINIMUM_BYTES` or, on file systems that count inodes, fewer free inodes than
    :data:`OUTPUT_MINIMUM_ENTRIES` (a full disk). Less free space than ``uncompressed_bytes`` gives a warning
    instead; if the disk then fills up during the write, nothing of the output is left
    (:func:`writing`).

    Returns
    -------
    str or None
        The warning, or None when the output fits uncompressed (or is not local).

    Raises
    ------
    DiskFullError
        The output cannot fit.
    """
    from ..storage.publish import is_local, local_path

    if not is_local(path):
        return None
    folder = os.path.dirname(os.path.abspath(local_path(path)))
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    stats = os.statvfs(folder)
    free = stats.f_bavail * stats.f_frsize
    inodes_short = stats.f_files > 0 and stats.f_favail < OUTPUT_MINIMUM_ENTRIES
    if free < OUTPUT_MINIMUM_BYTES or inodes_short:
        room = f"{stats.f_favail} free inodes" if inodes_short else f"{free:,} bytes free"
        raise DiskFullError(
            f"{option} {os.fspath(path)!r} cannot be written: the disk of {folder!r} is full "
            f"({room}). Free some space or choose another place; nothing was computed."
        )
    if free < uncompressed_bytes:
        return (
            f"{option} {os.fspath(path)!r} may not fit: it takes up to {_size(uncompressed_bytes)} "
            f"uncompressed and {folder!r} has {_size(free)} free (if it fills up, nothing of it is kept)."
        )
    return None


def labels_bytes(n_samples: int) -> int:
    """Uncompressed size of the labels of ``n_samples`` rows (int32)."""
    return 4 * int(n_samples)


def model_bytes(n_clusters: int, n_features: int) -> int:
    """Uncompressed size of a model's arrays, at most: float64 centers and a few float64 values per cluster."""
    return 8 * int(n_clusters) * (int(n_features) + 4)


def _size(n_bytes: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n_bytes < 1024 or unit == "GiB":
            return f"{n_bytes:,.0f} {unit}" if unit == "bytes" else f"{n_bytes:,.1f} {unit}"
        n_bytes /= 1024
    return ""


class DiskFullError(DaskmeansError, OSError):
    """An output did not fit where it was written: the disk (or the user's quota) filled up during the write."""


@contextlib.contextmanager
def writing(option: str, path: str | os.PathLike[str]) -> Iterator[None]:
    """Say which output a full disk or quota stopped (``ENOSPC``, ``EDQUOT``), in one line without a traceback.

    Any other failure passes unchanged. The output itself is atomic
    (:class:`~daskmeans.storage.publish.atomic_output`): its temporary folder is gone when the error reaches the
    user.
    """
    try:
        yield
    except OSError as error:
        if error.errno not in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            raise
        raise DiskFullError(
            f"{option} {os.fspath(path)!r} could not be written: {error.strerror}; nothing of it was "
            "left behind (an existing one is kept). Free some space or choose another place."
        ) from error


def parse_param(text: str, option: str = "--param", example: str = "tol=1e-3") -> tuple[str, Any]:
    """``NAME=VALUE`` -> (name, value): VALUE as a JSON or Python literal (5, 0.1, true, None, [1, 2]), else text.

    ``option`` and ``example`` name the command-line option in the error for a text that is not ``NAME=VALUE``.
    """
    name, sep, raw = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or not name.isidentifier():
        raise InvalidParameterError(f"{option} {text!r} is not NAME=VALUE (e.g. {option} {example}).")
    raw = raw.strip()
    for parse in (json.loads, ast.literal_eval):
        try:
            return name, parse(raw)
        except (ValueError, SyntaxError, TypeError):
            continue
    return name, raw


#: Estimator parameters the fit command sets from options of its own.
OWN_OPTIONS = {
    "n_clusters": "-k/--n-clusters",
    "n_components": "-k/--n-clusters",
    "random_state": "--random-state",
    "client": "--scheduler",
    "progress": "--quiet",
}


def algorithm_params(algorithm: str, options: dict[str, Any], params: tuple[str, ...]) -> dict[str, Any]:
    """The estimator parameters given on the command line, checked against the algorithm's parameters."""
    accepted = sorted(estimator_class(algorithm)._get_param_names())
    chosen = {}
    if options.get("max_iter") is not None and "max_iter" not in accepted and "max_epochs" in accepted:
        options = {
            ("max_epochs" if name == "max_iter" else name): value  # VRKM counts epochs
            for name, value in options.items()
        }
    for name, value in options.items():
        if value is not None:
            if name not in accepted:
                raise InvalidParameterError(f"--{name.replace('_', '-')} does not apply to --algorithm {algorithm}.")
            chosen[name] = value
    for text in params:
        name, value = parse_param(text)
        if name in OWN_OPTIONS:
            raise InvalidParameterError(f"--param {name} is set by {OWN_OPTIONS[name]}; use that option.")
        if name not in accepted:
            raise InvalidParameterError(
                f"--param {name}: --algorithm {algorithm} has no such parameter; its parameters are "
                f"{', '.join(n for n in accepted if n not in OWN_OPTIONS)}."
            )
        chosen[name] = value
    return chosen


def emit(summary: dict[str, Any], as_json: bool, lines: list[str]) -> None:
    from ..storage.zarr_safe import json_default

    if as_json:
        click.echo(json.dumps(summary, default=json_default))
    else:
        click.echo("\n".join(lines))


def compute_bytes(dataset: Dataset) -> int:
    """Size of the input as the passes compute it (uint8 data counts as float32)."""
    return dataset.n_samples * dataset.n_features * dataset.dtype.itemsize


def format_bytes(n: int) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("kiB", 2**10)):
        if n >= 0.9 * size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def shape_text(dataset: Dataset) -> str:
    return f"{dataset.n_samples:,} x {dataset.n_features} {dataset.source_dtype}"


def where(dataset: Dataset, path: str) -> str:
    return dataset.location or path
