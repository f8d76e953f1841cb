"""How much nmbatch's batch grows at its next iteration within a ``max_time`` budget: the time of the next
iteration forecast from the iterations so far (:class:`LapForecast`), and the growth cut to what still ends in time
(:func:`next_growth`)."""

from __future__ import annotations

from .. import config


class LapForecast:
    """How long nmbatch's next iteration will take, from the iterations so far.

    Revisiting the batch costs about what the last iteration that added no rows cost per row, times the rows
    revisited, and no less than the last iteration when that one grew the batch (the first revisit of new rows is
    not cheaper than adding them was); before any such iteration, what the last one cost. Each row a growth adds
    costs what the last added rows cost beyond revisiting the batch they joined (they are assigned from scratch,
    without bounds).

    Examples
    --------
    >>> laps = LapForecast()
    >>> laps.add(1.0, new_rows=1000, size=1000)  # the first batch: every row new
    >>> laps.add(0.25, new_rows=0, size=1000)
    >>> laps.next(new_rows=0, size=1000), laps.next(new_rows=2000, size=1000)
    (0.25, 2.25)
    >>> laps.rows_within(1.25, size=1000)  # the most new rows whose iteration ends within 1.25 s
    1000
    """

    def __init__(self):
        self.last = 0.0
        self.grew = False  # whether the last iteration added rows
        self.per_row = None  # seconds per row of the last iteration that added no rows
        self.per_new_row = None  # seconds per added row, beyond revisiting the batch it joined

    def add(self, seconds, new_rows, size):
        """Take in an iteration of ``seconds`` that added ``new_rows`` rows to the batch, which then held ``size``."""
        if new_rows:
            revisit = 0.0 if self.per_row is None else self.per_row * (size - new_rows)
            self.per_new_row = max(seconds - revisit, 0.0) / new_rows
        else:
            self.per_row = seconds / max(size, 1)
        self.last, self.grew = seconds, bool(new_rows)

    def revisit(self, size) -> float:
        """Expected seconds of revisiting a batch of ``size`` rows."""
        if self.per_row is None:
            return self.last
        return max(self.per_row * size, self.last if self.grew else 0.0)

    def next(self, new_rows, size) -> float:
        """Expected seconds of the next iteration, which revisits ``size`` rows and adds ``new_rows`` rows."""
        if not new_rows or self.per_new_row is None:
            return self.revisit(size)
        return self.revisit(size) + new_rows * self.per_new_row

    def rows_within(self, seconds, size) -> int | None:
        """The most rows the next iteration over ``size`` rows can add and still take at most ``seconds``
        (None: no limit is known yet; 0: no rows, or not even the revisit fits, which :meth:`next` tells)."""
        if not self.per_new_row:
            return None
        return max(0, int((seconds - self.revisit(size)) / self.per_new_row))


def next_growth(laps, size, wanted, seconds_left, min_rows=None):
    """The rows nmbatch's next iteration adds to its batch of ``size`` rows, within ``seconds_left`` of the budget.

    The growth rule asks for ``wanted`` new rows (0: none). All of them when no budget is set (``seconds_left``
    None) or when the forecast (:class:`LapForecast`) says the iteration still ends in time; else as many as end in
    time, when that is at least ``min(min_rows, wanted)`` (``min_rows`` None:
    :data:`~daskmeans.config.MIN_GROWTH_ROWS`), else none. None when not even the revisit ends in time: the run
    stops.

    Examples
    --------
    >>> laps = LapForecast()
    >>> laps.add(1.0, new_rows=1000, size=1000)
    >>> laps.add(0.5, new_rows=0, size=1000)
    >>> next_growth(laps, 1000, 1000, seconds_left=2.0, min_rows=100)  # 0.5 s + 1000 rows x 1 ms: in time
    1000
    >>> next_growth(laps, 1000, 1000, seconds_left=1.0, min_rows=100)  # the revisit and 500 rows
    500
    >>> next_growth(laps, 1000, 1000, seconds_left=0.55, min_rows=100)  # 50 rows: not worth it, revisit only
    0
    >>> next_growth(laps, 1000, 1000, seconds_left=0.4, min_rows=100) is None  # not even the revisit ends in time
    True
    """
    if seconds_left is None:
        return wanted
    if laps.next(0, size) > seconds_left:
        return None
    if not wanted or laps.next(wanted, size) <= seconds_left:
        return wanted
    rows = laps.rows_within(seconds_left, size)
    if rows is None:
        return wanted
    min_rows = config.MIN_GROWTH_ROWS if min_rows is None else min_rows
    return rows if rows >= min(min_rows, wanted) else 0


__all__ = ["LapForecast", "next_growth"]
