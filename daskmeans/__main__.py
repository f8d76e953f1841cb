"""``python -m daskmeans``: the command line (see :mod:`daskmeans.cli`)."""

from .cli import main

# The guard matters: Dask starts worker processes with "spawn", which imports this module again.
if __name__ == "__main__":
    main(prog_name="daskmeans")
