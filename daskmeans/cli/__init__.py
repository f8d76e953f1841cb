"""The ``daskmeans`` command line: make-data, fit, predict, info, demo, warm (and bench where installed).

Also reachable as ``python -m daskmeans`` and ``dask daskmeans``. Every mistake a user can make (a missing
input, a bad k or option value, an existing output, a scheduler that does not answer, a file that is not a model)
ends the command with exit status 1 and one line that says what is wrong (one JSON object on stdout with
``--json``), before any expensive work where possible.

Only click and daskmeans' light modules are imported here: each command imports the data, storage and engine
modules it needs when it runs, so that ``--help`` and ``info`` answer at once.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import logging
import sys

import click

from .._version import __version__
from .commands import demo, fit, make_data, predict
from .common import USER_ERRORS, CommandError, one_line
from .info import info
from .interrupts import INTERRUPTED_EXIT_STATUS, INTERRUPTED_MESSAGE, interrupts_with_deadline
from .warm import warm

#: Commands that live in optional modules: name -> (module, attribute). Imported only when used.
LAZY_COMMANDS = {"bench": ("daskmeans.bench.command", "bench")}
#: Their one-line help in ``daskmeans --help`` (listing them imports nothing).
LAZY_HELP = {"bench": "Benchmark the algorithms against their peers on real or synthetic data."}


def _module_exists(module: str) -> bool:
    """Whether ``module`` can be found, without importing it or its parent packages (only a top-level package
    that is already imported counts as found by its import)."""
    parts = module.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ModuleNotFoundError, ValueError):
        return False
    for part in parts[1:]:
        if spec is None or spec.submodule_search_locations is None:
            return False
        spec = importlib.machinery.PathFinder.find_spec(part, list(spec.submodule_search_locations))
    return spec is not None


def quiet_dask_failure_logs():
    """Keep Dask in this process from logging tracebacks the command reports itself in one line: a worker's
    failed task, the client's attempts to reconnect to a lost scheduler (worker processes are told by
    :class:`~daskmeans.engine.cluster.ClusterSpec`)."""
    for name in ("distributed.worker", "distributed.client"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    asyncio_logger = logging.getLogger("asyncio")
    if not any(isinstance(existing, AbandonedGatherFilter) for existing in asyncio_logger.filters):
        asyncio_logger.addFilter(AbandonedGatherFilter())


class AbandonedGatherFilter(logging.Filter):
    """Drops asyncio's "Task exception was never retrieved" about a Dask gather that a Ctrl-C abandoned
    (``AllExit``), and about a store write that failed after another had already failed the command (an
    ``OSError`` such as a full disk, or its temporary folder removed by the clean-up): the command reports the
    failure itself."""

    def filter(self, record):
        error = record.exc_info[1] if record.exc_info else None
        return not (error is not None and (type(error).__name__ == "AllExit" or isinstance(error, OSError)))


class DaskmeansGroup(click.Group):
    """A click group that loads optional commands on demand and turns user errors into one-line messages.

    Every mistake exits with status 1: errors of daskmeans and of the file system, and bad command lines (click's
    own usage errors, which would exit with 2); with ``--json`` the message is a JSON object on stdout. Any other
    failure (a corrupt chunk, a lost scheduler, a full disk) is one line too, naming the error, with its traceback
    only under ``daskmeans --debug``.
    """

    wants_json = False

    def main(self, args=None, *pargs, **kwargs):
        args = list(sys.argv[1:] if args is None else args)
        self.wants_json = "--json" in args
        with interrupts_with_deadline(self.report_interrupted):
            return super().main(args, *pargs, **kwargs)

    def interrupted(self, note=None) -> CommandError:
        """The error of a command stopped by Ctrl-C (``note``: how it stopped, when not the usual way)."""
        message = INTERRUPTED_MESSAGE if note is None else f"{INTERRUPTED_MESSAGE[:-1]} ({note})."
        error = CommandError(message, "KeyboardInterrupt", self.wants_json)
        error.exit_code = INTERRUPTED_EXIT_STATUS
        return error

    def report_interrupted(self, note):
        self.interrupted(note).show()

    def list_commands(self, ctx):
        names = set(super().list_commands(ctx))
        names.update(name for name, (module, _) in LAZY_COMMANDS.items() if _module_exists(module))
        return sorted(names)

    def format_commands(self, ctx, formatter):
        rows = []
        for name in self.list_commands(ctx):
            if name in self.commands:
                command = self.commands[name]
                if not command.hidden:
                    rows.append((name, command.get_short_help_str(formatter.width - 6 - len(name))))
            else:
                rows.append((name, LAZY_HELP.get(name, "")))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def get_command(self, ctx, name):
        command = super().get_command(ctx, name)
        if command is None and name in LAZY_COMMANDS:
            module, attribute = LAZY_COMMANDS[name]
            if _module_exists(module):
                command = getattr(importlib.import_module(module), attribute)
        return command

    def invoke(self, ctx):
        if not ctx.params.get("debug"):
            quiet_dask_failure_logs()
        try:
            return super().invoke(ctx)
        except CommandError:
            raise
        except USER_ERRORS as error:
            raise CommandError(one_line(error), type(error).__name__, self.wants_json) from error
        except click.UsageError as error:
            if not self.wants_json:
                error.exit_code = 1
                raise
            raise CommandError(one_line(error.format_message()), "UsageError", True) from error
        except KeyboardInterrupt as error:
            raise self.interrupted() from error
        except (click.exceptions.Exit, click.Abort):
            raise
        except Exception as error:
            if ctx.params.get("debug"):
                raise
            raise CommandError(
                f"{type(error).__name__}: {one_line(error)} (run 'daskmeans --debug ...' to see where)",
                type(error).__name__,
                self.wants_json,
            ) from error


@click.group(name="daskmeans", cls=DaskmeansGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="daskmeans")
@click.option("--debug", is_flag=True, help="Show the traceback of an unexpected failure.")
def main(debug):
    """Cluster data too large for one machine: chunked Zarr arrays on a Dask cluster.

    \b
    Start with `daskmeans demo`, or:
      daskmeans make-data blobs.zarr --n-samples 1000000 --n-features 64 --n-clusters 50
      daskmeans fit blobs.zarr --array X -k 50 --out model.zarr --labels blobs.zarr/labels
      daskmeans fit blobs.zarr --array X -k 50 --algorithm nmbatch --param bounds=yinyang
      daskmeans predict model.zarr blobs.zarr --array X --labels blobs.zarr/labels --overwrite
      daskmeans info model.zarr
    """


for _command in (make_data, fit, predict, info, demo, warm):
    main.add_command(_command)
