"""Progress over iterations: a bar (tqdm.auto: terminals and notebooks alike), or a function of each record."""

from __future__ import annotations


class ProgressReporter:
    """A context manager that shows one bar; ``update(record)`` advances it and shows the energy.

    Parameters
    ----------
    enabled : bool or callable
        True shows a bar; a callable is called with a copy of each history record instead (keys starting with
        ``_`` left out), e.g. to log progress or to watch a fit from another thread.
    total : int
        Upper bound on the number of iterations.
    desc : str
    """

    def __init__(self, enabled, total=None, desc="daskmeans"):
        self.function = enabled if callable(enabled) else None
        self.enabled = bool(enabled) and self.function is None
        self.total = total
        self.desc = desc
        self.bar = None

    def __enter__(self):
        if self.enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total, desc=self.desc, unit="it", leave=True)
        return self

    def update(self, record):
        if self.function is not None:
            self.function({key: value for key, value in record.items() if not key.startswith("_")})
        if self.bar is None:
            return
        self.bar.update(1)
        postfix = {"energy": f"{record['energy']:.6g}"}
        if "batch_size" in record:
            postfix["batch"] = record["batch_size"]
        self.bar.set_postfix(postfix, refresh=False)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
        return False
