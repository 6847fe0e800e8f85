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


# ---- servers without a utilisation flag, and other tenants (BEHAVIOURS.md section 5) --------------------
def hf_app(
    s: Trace,
    cards: list[int],
    model: str,
    at: float,
    pid: int | None = None,
    ppid: int | None = None,
    cmd: list | None = None,
    name: str = "uvicorn",
) -> Server:
    """A Hugging Face app under uvicorn (FastAPI + transformers, no utilisation flag): one process; with
    `device_map="auto"` over several cards the same PID holds every card (NVML lists it on each).
    `cmd` for other one-process servers (`transformers serve --continuous_batching`)."""
    ppid = s.shell if ppid is None else ppid
    cmd = cmd or [PY, "/usr/local/bin/uvicorn", "app:app", "--host", "0.0.0.0", "--port", "8000", "--workers", "1"]
    pid = pid if pid is not None else s.pid()
    ranks = [s.proc(name, cmd, ppid, at - 2.0, c, pid=pid) for c in cards]
    return Server("hf_app", ranks, [], list(cards))


def tgi(s: Trace, cards: list[int], model: str, at: float, pid: int | None = None, ppid: int | None = None) -> Server:
    """Hugging Face TGI: `text-generation-launcher` (no GPU memory; PID 1 in its container with `pid=1,
    ppid=0`) starts one `text-generation-server` shard per card (its children, NCCL between them) and the
    router (no GPU memory)."""
    ppid = s.shell if ppid is None else ppid
    n = str(len(cards))
    launcher = s.proc(
        "text-generation-launcher",
        ["text-generation-launcher", "--model-id", model, "--num-shard", n, "--port", "80"],
        ppid,
        at - 3.0,
        None,
        pid=pid,
    )
    cmd = ["/opt/conda/bin/python3.11", "/opt/conda/bin/text-generation-server", "serve", model]
    cmd += ["--sharded"] if len(cards) > 1 else []
    cmd += ["--uds-path", "/tmp/text-generation-server"]
    shards = [
        s.proc("text-generation-server", cmd + ["--rank", str(k)], launcher.pid, at - 1.0, c)
        for k, c in enumerate(cards)
    ]
    router = s.proc("text-generation-router", ["text-generation-router", "--port", "80"], launcher.pid, at, None)
    return Server("tgi", shards, [launcher, router], list(cards))


def triton(s: Trace, cards: list[int], model: str, at: float, backend: str = "pytorch") -> Server:
    """Triton Inference Server with `--model-control-mode=explicit` (models loaded, reloaded and unloaded at
    run time; no utilisation flag). `pytorch` (libtorch/onnxruntime/TensorRT, in-process): tritonserver
    itself holds the card. `tensorrtllm`: `mpirun -n TP tritonserver ...`, one tritonserver per rank under
    mpirun. `python`: tritonserver (no GPU memory here) runs the model in a `triton_python_backend_stub`
    child per card (see `triton_stub` for a reload into a new stub: a new PID)."""
    repo = ["--model-repository=/models", "--model-control-mode=explicit", f"--load-model={model.split('/')[-1]}"]
    if backend == "tensorrtllm":
        mpi = s.proc("mpirun", ["mpirun", "--allow-run-as-root", "-n", str(len(cards))], s.shell, at - 3.0, None)
        ranks = [
            s.proc("tritonserver", ["/opt/tritonserver/bin/tritonserver", *repo, f"--rank={k}"], mpi.pid, at - 1.0, c)
            for k, c in enumerate(cards)
        ]
        return Server("triton_trtllm", ranks, [mpi], list(cards))
    if backend == "python":
        srv = s.proc("tritonserver", ["/opt/tritonserver/bin/tritonserver", *repo], s.shell, at - 3.0, None)
        stubs = [triton_stub(s, srv.pid, c, model, at).ranks[0] for c in cards]
        return Server("triton_python", stubs, [srv], list(cards))
    p = s.proc("tritonserver", ["/opt/tritonserver/bin/tritonserver", *repo], s.shell, at - 2.0, cards[0])
    return Server("triton", [p], [], [cards[0]])


def triton_stub(s: Trace, tritonserver: int, card: int, model: str, at: float) -> Server:
    """A Python-backend model instance of Triton: a `triton_python_backend_stub` child of tritonserver on
    `card`; a reload or a new model version starts a new one (a new PID) before the old exits."""
    cmd = ["/opt/tritonserver/backends/python/triton_python_backend_stub", f"/models/{model.split('/')[-1]}/1"]
    p = s.proc("triton_python_backend_stub", cmd, tritonserver, at - 1.0, card)
    return Server("triton_python", [p], [], [card])


def trtllm_serve(s: Trace, cards: list[int], model: str, at: float) -> Server:
    """TensorRT-LLM's `trtllm-serve` (no utilisation flag; its KV cache takes `free_gpu_memory_fraction` of
    what is free): with TP=1 the serve process holds the card; with TP>1 it holds none and its MPI workers
    (spawned through mpi4py futures) hold one card each."""
    cmd = ["/usr/bin/python3", "/usr/local/bin/trtllm-serve", model, "--tp_size", str(len(cards)), "--port", "8000"]
    if len(cards) == 1:
        p = s.proc("trtllm-serve", cmd, s.shell, at - 2.0, cards[0])
        return Server("trtllm_serve", [p], [], list(cards))
    api = s.proc("trtllm-serve", cmd, s.shell, at - 4.0, None)
    work = [PY, "-m", "mpi4py.futures.server"]
    ranks = [s.proc("python3", work, api.pid, at - 1.0, c) for c in cards]
    return Server("trtllm_serve", ranks, [api], list(cards))


def notebook(s: Trace, card: int, at: float, user: str = "alice") -> Server:
    """A Jupyter notebook as the watched workload: jupyter-lab (no GPU memory) under the user's shell and
    its ipykernel holding the card (whatever the kernel runs: transformers `generate()`, a fine-tune)."""
    lab = s.proc("jupyter-lab", [PY, "/usr/local/bin/jupyter-lab", "--no-browser"], s.shell, at - 60.0, None)
    cmd = [PY, "-m", "ipykernel_launcher", "-f", f"/home/{user}/.local/share/jupyter/runtime/kernel-7c1e.json"]
    k = s.proc("python3", cmd, lab.pid, at - 5.0, card, username=user)
    return Server("notebook", [k], [lab], [card])


def mps(s: Trace, cards: list[int], at: float) -> Server:
    """The CUDA MPS control daemon (no GPU memory) and its server `nvidia-cuda-mps-server`, which NVML lists
    on every card it serves (one PID, ~27 MB each); its clients are other processes. Part of no inference
    server; not a stray."""
    ctl = s.proc("nvidia-cuda-mps-control", ["nvidia-cuda-mps-control", "-d"], 1, at - 30.0, None)
    pid = s.pid()
    procs = [s.proc("nvidia-cuda-mps-server", ["nvidia-cuda-mps-server"], ctl.pid, at - 1.0, c, pid=pid) for c in cards]
    for p in procs:
        p.libtorch_cuda = p.libcudart = False  # the driver's own server: neither torch nor the runtime
    return Server("mps", procs, [ctl], list(cards))


def rl_colocated(s: Trace, cards: list[int], model: str, at: float) -> Server:
    """An RL trainer colocating vLLM (veRL / OpenRLHF hybrid engine): a Ray driver and the raylet (no GPU
    memory) and one Ray worker actor per card holding both the trainer and an in-process vLLM engine."""
    raylet = s.proc(
        "raylet", ["/usr/local/lib/python3.11/dist-packages/ray/core/src/ray/raylet/raylet"], s.shell, at - 30.0, None
    )
    driver = s.proc(
        "python3",
        [
            PY,
            "-m",
            "verl.trainer.main_ppo",
            f"actor_rollout_ref.model.path={model}",
            "actor_rollout_ref.rollout.name=vllm",
        ],
        s.shell,
        at - 25.0,
        None,
    )
    ranks = [
        s.proc("ray::WorkerDict", ["ray::WorkerDict.actor_rollout_generate_sequences"], raylet.pid, at - 5.0, c)
        for c in cards
    ]
    return Server("rl_colocated", ranks, [raylet, driver], list(cards))
