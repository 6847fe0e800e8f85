"""Process layouts of the engines (BEHAVIOURS.md section 1, "Process layouts").

A server's parent is the trace's supervisor (a shell, a container shim) unless `ppid` says otherwise;
with `pid=1, ppid=0` it is a container's PID 1. Each returns a `Server` whose `ranks[i]` will hold card
`cards[i]` once a behaviour gives it memory (processes are created just before `at`, then their CUDA
contexts appear); a process that never holds memory never appears in a sample nor in a `proc` line, as
with NVML.
"""

from __future__ import annotations

from .model import Server, Trace

PY = "/usr/bin/python3"


def vllm_v0(
    s: Trace,
    cards: list[int],
    model: str,
    at: float,
    pid: int | None = None,
    ppid: int | None = None,
    user: str = "root",
) -> Server:
    """vLLM V0 with tensor parallel: the API server holds card 0 and forks one worker per other card
    (same command line, its children). With `pid=1` it is a container's PID 1: its workers then have
    ppid 1 too, and are no orphans."""
    ppid = s.shell if ppid is None else ppid
    cmd = [
        PY,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model,
        "--tensor-parallel-size",
        str(len(cards)),
        "--api-key",
        "sk-test-not-exported",
    ]
    srv = s.proc("python3", cmd, ppid, at - 3.0, cards[0], pid=pid, username=user)
    workers = [s.proc("python3", cmd, srv.pid, at - 1.0, c, username=user) for c in cards[1:]]
    return Server("vllm_v0", [srv, *workers], [], list(cards))


def vllm_v1(
    s: Trace,
    cards: list[int],
    model: str,
    at: float,
    pid: int | None = None,
    ppid: int | None = None,
    user: str = "root",
) -> Server:
    """vLLM V1: the API server holds no GPU memory; its EngineCore holds the card (TP=1), or the
    EngineCore's worker children hold one card each (TP>1)."""
    ppid = s.shell if ppid is None else ppid
    cmd = ["vllm", "serve", model, "--tensor-parallel-size", str(len(cards))]
    api = s.proc("vllm", cmd, ppid, at - 4.0, None, pid=pid, username=user)
    spawn = [PY, "-c", "from multiprocessing.spawn import spawn_main; spawn_main()", "--multiprocessing-fork"]
    if len(cards) == 1:
        core = s.proc("VLLM::EngineCore", spawn, api.pid, at - 1.0, cards[0], username=user)
        return Server("vllm_v1", [core], [api], list(cards))
    core = s.proc("VLLM::EngineCore", spawn, api.pid, at - 2.0, None, username=user)
    workers = [s.proc(f"VLLM::Worker_TP{r}", spawn, core.pid, at - 1.0, c, username=user) for r, c in enumerate(cards)]
    return Server("vllm_v1", workers, [api, core], list(cards))


def sglang(
    s: Trace, cards: list[int], model: str, at: float, pid: int | None = None, ppid: int | None = None
) -> Server:
    """SGLang: one launcher (no GPU memory) and a scheduler process per TP rank under it."""
    ppid = s.shell if ppid is None else ppid
    cmd = [PY, "-m", "sglang.launch_server", "--model-path", model, "--tp", str(len(cards))]
    launcher = s.proc("python3", cmd, ppid, at - 3.0, None, pid=pid)
    ranks = [s.proc(f"sglang::scheduler_TP{r}", cmd, launcher.pid, at - 1.0, c) for r, c in enumerate(cards)]
    return Server("sglang", ranks, [launcher], list(cards))


def hf_server(s: Trace, card: int, model: str, at: float, pid: int | None = None, ppid: int | None = None) -> Server:
    """A server without a preallocated pool (Hugging Face style, TGI without paged attention)."""
    ppid = s.shell if ppid is None else ppid
    cmd = [PY, "serve.py", "--model", model]
    p = s.proc("python3", cmd, ppid, at - 1.0, card, pid=pid)
    return Server("hf", [p], [], [card])
