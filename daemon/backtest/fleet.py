"""The backtest over a fleet: list the cards, analyse each in a small worker pool, stream one line per card
as it finishes, then the totals.

Cards are independent, so each is a job of its own (its HTTP reads, then its analysis) and at most
`2 x workers` are in flight: memory stays bounded by a few cards' chunks and histories however large the
fleet. A failure that every card would meet (Prometheus down, a refused query, a timeout) ends the run with
one line; any other failure is reported on its card's line and the others go on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from ..errors import UsageError
from ..sources.prometheus import PrometheusClient, PrometheusError
from .card import CardResult, run_card
from .options import Options
from .report import Totals
from .series import Card, cards_from_series, in_shard, matchers


def list_cards(client: PrometheusClient, opts: Options) -> list[Card]:
    """The cards with GPU-memory series in the range (and in this shard)."""
    try:
        label_sets = client.series(matchers(opts.selector), opts.start, opts.end)
    except PrometheusError as e:
        if "bad_data" in str(e):  # the only user input in that request is the selector
            raise UsageError(f"--selector {opts.selector!r} is not a PromQL label matcher: {e}") from None
        raise
    return [c for c in cards_from_series(label_sets) if in_shard(c, opts.shard)]


def run_cards(client: PrometheusClient, cards: list[Card], opts: Options) -> Iterator[CardResult]:
    """Each card's result as it finishes (completion order)."""
    window = max(1, 2 * opts.workers)
    todo = iter(cards)
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=opts.workers, thread_name_prefix="backtest") as pool:
        pending: set[Future[CardResult]] = set()

        def submit() -> None:
            for card in todo:
                pending.add(pool.submit(run_card, client, card, opts.start, opts.end, opts.step_s, stop))
                if len(pending) >= window:
                    return

        submit()
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    pending.discard(f)
                    yield f.result()  # a fatal PrometheusError is raised here
                submit()
        finally:  # a fatal error (or the reader left): the cards in flight stop at their next read
            stop.set()
            for f in pending:
                f.cancel()


def backtest(opts: Options, emit: Callable[[CardResult], None]) -> Totals:
    """Run the whole backtest; `emit` sees each card's result as it finishes. Raises `OomwatchError`
    (one line) for a failure that stops it."""
    t0 = time.perf_counter()
    totals = Totals()
    with PrometheusClient(opts.url, opts.timeout_s) as client:
        cards = list_cards(client, opts)
        for res in run_cards(client, cards, opts):
            totals.add(res)
            emit(res)
    totals.seconds = time.perf_counter() - t0
    return totals
