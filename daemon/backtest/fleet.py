"""The backtest over a fleet: list the cards, analyse each in a pool of worker processes, stream one line per
card as it finishes, then the totals.

Cards are independent, so each is a job of its own (its HTTP reads, then its analysis), run in one of
`--workers` processes, each with its own connection to Prometheus. Processes, not threads: the analysis is
Python, and threads sharing one interpreter lock ran four cards at 0.55x the rate of one card at a time, at
twice the CPU (bench/RESULTS.md, "Fleet backtest in processes"). Each process holds one card (a chunk and
the analysis' fixed history), so memory stays bounded however large the fleet. A failure that every card would
meet (Prometheus down, a refused query, a timeout) ends the run with one line and stops every worker; any
other failure is reported on its card's line and the others go on.
"""

from __future__ import annotations

import multiprocessing
import signal
import time
from collections.abc import Callable, Iterator

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
    """Each card's result as it finishes (completion order): in this process with `client` for one worker,
    else in a pool of worker processes, which a fatal error (raised here) or the reader leaving ends at once."""
    workers = min(opts.workers, len(cards))
    if workers <= 1:
        for card in cards:
            yield run_card(client, card, opts.start, opts.end, opts.step_s)
        return
    with _context().Pool(workers, initializer=_start_worker, initargs=(opts.url, opts.timeout_s)) as pool:
        jobs = [(card, opts.start, opts.end, opts.step_s) for card in cards]
        yield from pool.imap_unordered(_card_job, jobs)  # leaving the block terminates the workers


def _context() -> multiprocessing.context.BaseContext:
    """Fresh interpreters, never a fork of this one (its threads and sockets): a fork server where the
    platform has one (started once with the analysis imported, so each worker starts in milliseconds),
    else spawn."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["oomwatch.backtest.card"])
        return ctx
    return multiprocessing.get_context("spawn")


#: The worker process's own connection to Prometheus (`_start_worker`).
_client: PrometheusClient | None = None


def _start_worker(url: str, timeout_s: float) -> None:
    global _client
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it ends the pool
    _client = PrometheusClient(url, timeout_s)


def _card_job(job: tuple[Card, float, float, float]) -> CardResult:
    assert _client is not None, "a backtest worker ran before its start"
    return run_card(_client, *job)


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
