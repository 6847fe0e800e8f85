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
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from ..errors import OomwatchError, UsageError
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
    else in a pool of worker processes with at most two cards per worker queued (memory stays bounded). A
    fatal error (raised here), a worker that died, or the reader leaving ends the pool at once."""
    workers = min(opts.workers, len(cards))
    if workers <= 1:
        for card in cards:
            yield run_card(client, card, opts.start, opts.end, opts.step_s, opts.plot_dir)
        return
    pool = ProcessPoolExecutor(
        workers, mp_context=_context(), initializer=_start_worker, initargs=(opts.url, opts.timeout_s)
    )
    todo = iter(cards)
    pending: set[Future[CardResult]] = set()

    def submit() -> None:
        for card in todo:
            pending.add(pool.submit(_card_job, (card, opts.start, opts.end, opts.step_s, opts.plot_dir)))
            if len(pending) >= 2 * workers:
                return

    try:
        submit()
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                pending.discard(f)
                yield f.result()  # a fatal PrometheusError is raised here
            submit()
    except BrokenProcessPool:
        # A worker was killed (the kernel's OOM killer, a signal): its card's result is lost, and the pool
        # cannot say which. The lines already written stand; the run ends with one line, never a hang.
        raise OomwatchError(
            "a backtest worker process died before its card was done (out of memory, or killed); "
            "the cards above are complete: rerun with --shard or fewer --workers"
        ) from None
    finally:
        _stop(pool)


def _stop(pool: ProcessPoolExecutor) -> None:
    """End the pool now: its queued cards dropped, the cards in flight not waited for (a read can wait out
    its timeout). Python 3.14 has `terminate_workers`; before it, the executor's own process table."""
    stop = getattr(pool, "terminate_workers", None)
    if callable(stop):
        stop()
        return
    for p in list(getattr(pool, "_processes", {}).values()):
        p.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


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


def _card_job(job: tuple[Card, float, float, float, str | None]) -> CardResult:
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
