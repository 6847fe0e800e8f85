"""Detection benchmark: replay every scenario and every real recording through the analysis, score it.

    python bench/detection.py [--fast] [--only NAME ...] [--out FILE] [--json FILE] [--jobs N]

Each trace goes through exactly what `oomwatch replay` runs: its records parsed by `oomwatch.trace.parse_line`
(which drops every annotation) and fed by `oomwatch.feed.feed` into `Analyzer(gpus)` built from the parsed
header, as `oomwatch.feed.replay_trace` does. The scorer alone reads the truth: the generator's (for the
scenarios) or the recording's own `expect` header and `oom` events (for `../shared/traces`, skipped with a
note when absent). Writes `bench/DETECTION.md` (or `--out`) and, with `--json`, the results as JSON.
Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import math
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench.scenarios import FAST, SCENARIOS  # noqa: E402

SHARED_TRACES = os.path.join(
    os.environ.get("OOMWATCH_SHARED") or os.path.join(os.path.dirname(ROOT), "shared"), "traces"
)
PAGE, LEAK, SPIKE, STRAY, IMBALANCE = (
    "GPUOOMImminent",
    "GPUMemoryLeak",
    "GPUMemorySpikeRisk",
    "GPUStrayProcess",
    "GPUMemoryImbalance",
)
GRACE_S = 15.0  # an alert may still start this long after its episode ended (evaluation lag, 0.2 Hz samples)
OOM_LEAD_MAX_S = 600.0  # GPUOOMImminent at least min(this, half the leak span) before each OOM
SPIKE_WARN_S = 300.0  # a spike OOM must be preceded by a spike-risk (or page) active this close to it
#: An alert of a card that fires again this soon after it resolved, with no OOM between (the server died and
#: its successor is a new episode), is one episode told twice: a flap. The horizon's length: on-call paged,
#: cleared and paged again within it reads the first clear as a false alarm.
REFIRE_S = 600.0
STRAY_WITHIN_S = 120.0  # GPUStrayProcess for a stray within this of its first appearance
SLOW_LEAK_SHARE = 0.02  # default deadline for a leak that never reaches OOM: twice the time to leak
SLOW_LEAK_MIN_S, SLOW_LEAK_MAX_S = 600.0, 6 * 3600.0  # ... 2% of the card, within these bounds


# ---- inputs -----------------------------------------------------------------------------------------
#: Real H200 recordings kept in this repository (they travel with it, unlike ../shared): a torch workload
#: with the allocator probe (its `alloc` lines: healthy cache growth, a leak under a warm cache to a real
#: OOM; bench/gpu_probe.py) and the live daemon's flight dump of a plain torch process leaking from birth to
#: a real OOM beside a server and an orphan (bench/gpu_live.py).
PROBE_TRACES = os.path.join(ROOT, "bench", "results", "*.jsonl")


#: The second, independent generator (built by other hands, with other assumptions): its traces are written
#: once into this cache (deterministic, about a minute) and scored by their own `expect` labels.
SECOND_GENERATOR = os.path.join(os.path.dirname(SHARED_TRACES), "generators", "long_traces.py")
SECOND_CACHE = os.path.join(ROOT, "bench", ".cache", "second_generator")
SOURCES = ("project", "second", "real")


def scenario_of(item: str):
    """(Spec, reseed) of a project scenario item (`name`, or `name#K` drawn from its K-th other seed), or
    None for a trace file."""
    name, _, k = item.partition("#")
    if name in SCENARIOS and (not k or k.isdigit()):
        return SCENARIOS[name], int(k or 0)
    return None


def real_traces() -> list[str]:
    return sorted(glob.glob(os.path.join(SHARED_TRACES, "*.jsonl"))) + sorted(glob.glob(PROBE_TRACES))


#: Runs the second generator with every scenario's seed moved by K (argv: generator, out dir, K); its
#: labels come from its own simulation, so a redrawn trace is labelled as truly as the original.
RESEED_SECOND = (
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('long_traces', sys.argv[1])\n"
    "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
    "k = int(sys.argv[3]); m.SEEDS = {n: s + 7919 * k for n, s in m.SEEDS.items()}\n"
    "sys.exit(m.main([sys.argv[1], sys.argv[2]]))\n"
)


def second_traces(reseed: int = 0) -> list[str]:
    """The second generator's traces, written into SECOND_CACHE when missing ([] where it is absent);
    `reseed` K > 0: drawn from its K-th other seeds, in a cache of their own."""
    if not os.path.isfile(SECOND_GENERATOR):
        return []
    cache = SECOND_CACHE + (f"_reseed{reseed}" if reseed else "")
    stamp = os.path.join(cache, ".source-mtime")
    mtime = str(os.path.getmtime(SECOND_GENERATOR))
    fresh = False
    if os.path.isfile(stamp):
        with open(stamp, encoding="utf-8") as f:
            fresh = f.read() == mtime
    if not fresh:
        os.makedirs(cache, exist_ok=True)
        print(f"writing the second generator's traces into {cache} ...", file=sys.stderr)
        argv = [SECOND_GENERATOR, cache] if not reseed else ["-c", RESEED_SECOND, SECOND_GENERATOR, cache, str(reseed)]
        subprocess.run([sys.executable, *argv], check=True, stdout=subprocess.DEVNULL)
        with open(stamp, "w", encoding="utf-8") as f:
            f.write(mtime)
    return sorted(glob.glob(os.path.join(cache, "*.jsonl")))


def source_of(item: str) -> str:
    if scenario_of(item) is not None:
        return "project"
    return "second" if os.path.abspath(item).startswith(SECOND_CACHE) else "real"


def load(item: str):
    """(header dict, record dicts, truth dict) of a scenario name (`name#K`: redrawn) or a trace path."""
    sc = scenario_of(item)
    if sc is not None:
        s = sc[0].build(sc[1])
        recs = s.records()
        header = next(recs)
        return header, recs, header["truth"]
    with open(item, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    exp = lines[0].get("expect") or {}
    if any(k in exp for k in ("forbid", "require", "forbid_gpu")):
        return lines[0], iter(lines[1:]), truth_of_labels(lines)
    return lines[0], iter(lines[1:]), truth_of_recording(lines)


def truth_of_labels(lines: list[dict]) -> dict:
    """Truth of a second-generator trace from its labels (see ../shared/generators/README.md): leak
    episodes on the cards its `require` or `shape` names as leaking, onset at the first `phase` named
    `leak` (of that card, where it says), OOMs from `oom` events; the label rules themselves (`forbid`,
    `forbid_gpu`, `forbid_before_onset`, `require` with `lead_s`/`within_s`, `stray_pid`) are kept for
    `score_labels`."""
    head, rest = lines[0], lines[1:]
    exp = head.get("expect") or {}
    samples = [r for r in rest if "gpus" in r and "t" in r]
    end = samples[-1]["t"] if samples else 0.0
    leak_phases = [r for r in rest if r.get("event") == "phase" and r.get("name") == "leak"]
    ooms = [r for r in rest if r.get("event") == "oom"]
    leaking = {str(q["gpu"]) for q in exp.get("require") or () if q["alert"] in (LEAK, PAGE)}
    if exp.get("leak"):
        for gpu, shapes in (exp.get("shape") or {}).items():
            if set(shapes if isinstance(shapes, list) else [shapes]) <= {"ramp", "staircase"}:
                leaking.add(str(gpu))
    eps = []
    for g in head["gpus"]:
        i = g["index"]
        if str(i) not in leaking:
            continue
        onset = next((r["t"] for r in leak_phases if r.get("gpu") in (None, i)), None)
        oom = next((r["t"] for r in ooms if int(r.get("gpu", 0)) == i), None)
        eps.append(
            {
                "gpu": i,
                "kind": "leak",
                "pattern": "leak",
                "onset": onset if onset is not None else 0.0,
                "visible": onset if onset is not None else 0.0,
                "rate_bytes_per_second": None,
                "end": oom,
                "oom": oom,
                "deadline_s": None if oom is not None else end - (onset or 0.0),
            }
        )
    strays = []
    if exp.get("stray_pid") is not None:
        pid = int(exp["stray_pid"])
        gpu = next((x["i"] for s in samples for x in s["gpus"] if any(p[0] == pid for p in x.get("procs") or ())), 0)
        t = next((s["t"] for s in samples for x in s["gpus"] if any(p[0] == pid for p in x.get("procs") or ())), 0.0)
        # a process becomes a stray when it is orphaned: its description re-read with parent PID 1
        t = next((r["t"] for r in rest if r.get("event") == "proc" and r.get("pid") == pid and r.get("ppid") == 1), t)
        strays.append({"gpu": gpu, "pid": pid, "t": t})
    onset_all = min((e["onset"] for e in eps), default=None)
    return {
        "episodes": eps,
        "strays": strays,
        "imbalance": exp.get("imbalance_gpu") is not None,
        "duration": end,
        "labels": exp,
        "onset": onset_all,
        "ooms": [(int(r.get("gpu", 0)), r["t"]) for r in ooms],
        # a leak card of a label without a strict `leak` (null: "record, do not judge") is not gated
        "judge_leaks": exp.get("leak") is not None or "GPUMemoryLeak" in (exp.get("forbid") or ()),
    }


def score_labels(truth: dict, fires: list[dict]) -> tuple[list[str], list[str]]:
    """The second generator's own label rules, as (gating failures, notes)."""
    exp = truth["labels"]
    fail, notes = [], []
    onset = truth["onset"]
    for f in fires:
        if f["alert"] in exp.get("forbid") or ():
            fail.append(f"forbidden {f['alert']} on GPU {f['gpu']} at {f['start']:.0f} s")
        if f["alert"] in (exp.get("forbid_gpu") or {}).get(str(f["gpu"]), ()):
            fail.append(f"forbidden {f['alert']} on GPU {f['gpu']} at {f['start']:.0f} s (card-scoped)")
        if f["alert"] in (exp.get("forbid_before_onset") or ()) and onset is not None and f["start"] < onset:
            fail.append(f"{f['alert']} on GPU {f['gpu']} at {f['start']:.0f} s, before the onset at {onset:.0f} s")
        if f["alert"] in (exp.get("record") or ()):
            notes.append(f"{f['alert']} on GPU {f['gpu']} at {f['start']:.0f} s (recorded, not judged)")
    for q in exp.get("require") or ():
        gpu, pid = str(q["gpu"]), q.get("pid")
        cands = [
            f
            for f in fires
            if f["alert"] == q["alert"]
            and f["gpu"] == gpu
            and (pid is None or f["pid"] == str(pid))
            and (onset is None or f["start"] >= onset)
        ]
        oom = next((t for g, t in truth["ooms"] if str(g) == gpu), None)
        if q.get("lead_s") is not None and oom is not None:
            cands = [f for f in cands if f["start"] <= oom - q["lead_s"]]
        if q.get("within_s") is not None and onset is not None:
            cands = [f for f in cands if f["start"] <= onset + q["within_s"]]
        if not cands:
            fail.append(f"required {q['alert']} on GPU {gpu} not raised in time ({json.dumps(q)})")
    if exp.get("forbid_stray_other_pids") and exp.get("stray_pid") is not None:
        for f in fires:
            if f["alert"] == STRAY and f["pid"] not in (None, str(exp["stray_pid"])):
                fail.append(f"GPUStrayProcess for pid {f['pid']}, not the stray {exp['stray_pid']}")
    return fail, notes


def truth_of_recording(lines: list[dict]) -> dict:
    """Truth of a real recording from its annotations: `expect` (shape per GPU, stray, imbalance),
    `oom` events, the `leak` phase (else the leaking card's first process) as the onset."""
    head, rest = lines[0], lines[1:]
    exp = head.get("expect") or {}
    samples = [r for r in rest if "gpus" in r and "t" in r]
    end = samples[-1]["t"] if samples else 0.0
    leak_phases = [
        r["t"]
        for r in rest
        if r.get("event") == "phase" and (r.get("name") == "leak" or r.get("phase") == "leak_start")
    ]
    ooms = [r for r in rest if r.get("event") == "oom"]
    eps = []
    for g in head["gpus"]:
        i = g["index"]
        shape = (exp.get("shape") or {}).get(str(i))
        # a leaking card: its shape is a leak's, or the trace leaks and this card died of it or cycles on it
        mine = [r["t"] for r in ooms if int(r.get("gpu", 0)) == i]
        leaking = shape in ("staircase", "ramp") or (exp.get("leak") and (mine or shape == "sawtooth"))
        # one episode per OOM (a crash loop dies several times), each from the first onset since the one before
        since = -math.inf
        for oom in mine or [None]:
            upto = math.inf if oom is None else oom
            first = next(
                (r["t"] for r in samples if since < r["t"] for x in r["gpus"] if x["i"] == i and x.get("procs")), 0.0
            )
            if leaking:
                onset = min((t for t in leak_phases if since < t <= upto), default=first)
                pattern = shape if shape in ("staircase", "ramp") else "leak"
                kind, deadline = "leak", None if oom is not None else end - onset
            elif oom is not None:
                onset, pattern, kind, deadline = first, "spike", "spike", None
            else:
                break
            eps.append(
                {
                    "gpu": i,
                    "kind": kind,
                    "pattern": pattern,
                    "onset": onset,
                    "visible": onset,
                    "rate_bytes_per_second": None,
                    "end": oom,
                    "oom": oom,
                    "deadline_s": deadline,
                }
            )
            since = upto
    strays = []
    if exp.get("stray"):
        for r in rest:
            if r.get("event") == "proc" and r.get("ppid") == 1:
                gpu = next(
                    (x["i"] for s in samples for x in s["gpus"] if any(p[0] == r["pid"] for p in x.get("procs") or ())),
                    0,
                )
                strays.append({"gpu": gpu, "pid": r["pid"], "t": r["t"]})
    return {
        "episodes": eps,
        "strays": strays,
        "imbalance": bool(exp.get("imbalance")),
        "duration": end,
        "summary_shape": exp.get("shape") or {},
    }


# ---- one trace --------------------------------------------------------------------------------------
def replay(item: str) -> tuple[dict, list[dict], int, float, dict]:
    """Feed one trace as `oomwatch replay` does: (truth, transitions, samples, feed seconds, header)."""
    return _replay(item)[:5]  # type: ignore[return-value]


def _replay(item: str, transform=None) -> tuple[dict, list[dict], int, float, dict, dict]:
    """`replay` and the summary's per-GPU part at the end. `transform` (records -> records), where given,
    changes the parsed records before they are fed (bench/robustness.py: a recorder's irregularities)."""
    from oomwatch.analysis.analyzer import Analyzer
    from oomwatch.feed import feed
    from oomwatch.trace import parse_header, parse_line

    header, recs, truth = load(item)
    gpus = parse_header(json.dumps(header), item).gpus
    parsed = [r for r in (parse_line(o) for o in recs) if r is not None]
    if transform is not None:
        parsed = transform(parsed)
    an = Analyzer(gpus)
    trans: list = []
    t0 = time.perf_counter()
    n = feed(an, parsed, trans.append)
    dt = time.perf_counter() - t0
    if an.analysis_errors:  # the daemon goes on past a detector that raises; a benchmark must not
        raise RuntimeError(f"{item}: a detector raised {dict(an.analysis_errors)} (see the oomwatch.analysis log)")
    return truth, as_dicts(trans), n, dt, header, an.summary()["gpus"]


def score_summary(truth: dict, summary: dict, header: dict) -> tuple[list[str], list[str]]:
    """The summary of a card that never leaked must not call it a leak (gating); its shape against the
    labels' allowed shapes, where there are labels (reported)."""
    fail, notes = [], []
    labels = truth.get("labels") or {}
    allowed = labels.get("shape") or truth.get("summary_shape") or {}
    for g in header["gpus"]:
        i = str(g["index"])
        got = summary.get(i) or {}
        leaking = any(e["gpu"] == g["index"] for e in truth["episodes"])  # a true episode: any verdict may stand
        if got.get("leak") and not leaking and truth.get("judge_leaks", True):
            fail.append(f"the summary calls healthy GPU {i} a leak ({got.get('shape')})")
        want = allowed.get(i)
        if want is not None and got.get("shape") not in (want if isinstance(want, list) else [want]):
            notes.append(f"summary shape of GPU {i} is {got.get('shape')}, labelled {want}")
    return fail, notes


def as_dicts(transitions) -> list[dict]:
    """Alert transitions as plain dicts (time, alert name, labels, state)."""
    return [
        {"t": tr.t, "alert": tr.alert.alertname, "labels": dict(tr.alert.labels), "state": tr.state}
        for tr in transitions
    ]


def firing_episodes(transitions: list[dict]) -> list[dict]:
    """[{alert, gpu, pid, start, end}] from the transitions (end None: still firing at the end)."""
    open_: dict = {}
    eps = []
    for tr in transitions:
        key = (tr["alert"], tuple(sorted(tr["labels"].items())))
        if tr["state"] == "firing":
            e = {
                "alert": tr["alert"],
                "gpu": tr["labels"].get("gpu"),
                "pid": tr["labels"].get("pid"),
                "start": tr["t"],
                "end": None,
            }
            open_[key] = e
            eps.append(e)
        elif key in open_:
            open_.pop(key)["end"] = tr["t"]
    return eps


def refires(on: list[dict], ooms: list[float]) -> list[tuple[str, float, float]]:
    """(alert, resolved at, fired again at) for each episode of one card's alert that began within `REFIRE_S`
    of the same alert's (same labels) last one ending, with no OOM of the card in between."""
    last: dict = {}
    out = []
    for f in sorted(on, key=lambda f: f["start"]):
        key = (f["alert"], f["pid"])
        prev = last.get(key)
        soon = prev is not None and prev["end"] is not None and f["start"] - prev["end"] <= REFIRE_S
        if soon and not any(prev["start"] <= o <= f["start"] for o in ooms):
            out.append((f["alert"], prev["end"], f["start"]))
        last[key] = f
    return out


def slow_deadline(ep: dict, total: int) -> float:
    if ep.get("deadline_s") is not None:
        return ep["deadline_s"]
    rate = ep.get("rate_bytes_per_second") or 0.0
    t = 2 * SLOW_LEAK_SHARE * total / rate if rate > 0 else SLOW_LEAK_MAX_S
    return min(max(t, SLOW_LEAK_MIN_S), SLOW_LEAK_MAX_S)


def expectations(truth: dict, header: dict) -> list[dict]:
    """The truth as alert expectations, for people reading the results: which alert must fire on which
    card (and pid) by when, which must never fire. `score` judges exactly these."""
    out = []
    for g in header["gpus"]:
        i = g["index"]
        eps = [e for e in truth["episodes"] if e["gpu"] == i]
        if not eps:
            out.append({"gpu": i, "never": [PAGE, LEAK], "why": "healthy card"})
        for e in eps:
            if e["oom"] is not None and e["kind"] == "spike":
                out.append({"gpu": i, "must": f"{SPIKE} or {PAGE}", "by": e["oom"], "why": "spike OOM"})
            elif e["oom"] is not None:
                floor = min(OOM_LEAD_MAX_S, 0.5 * (e["oom"] - e["onset"]))
                out.append(
                    {
                        "gpu": i,
                        "must": PAGE,
                        "after": e["onset"],
                        "by": round(e["oom"] - floor, 3),
                        "why": f"{e['pattern']} to OOM at {e['oom']}",
                    }
                )
                if e["kind"] == "leak":
                    out.append({"gpu": i, "must": LEAK, "after": e["onset"], "by": e["oom"], "why": "leak to OOM"})
            elif e["kind"] == "leak":
                by = e.get("visible", e["onset"]) + slow_deadline(e, g["total"])
                out.append(
                    {
                        "gpu": i,
                        "must": LEAK,
                        "after": e["onset"],
                        "by": round(by, 3),
                        "why": "leak short of OOM"
                        + ("" if by <= (e["end"] or truth["duration"]) else " (not judged: the trace ends first)"),
                    }
                )
            out.append({"gpu": i, "never": [PAGE, LEAK], "before": e["onset"], "why": "before the onset"})
    for st in truth["strays"]:
        out.append(
            {"gpu": st["gpu"], "pid": st["pid"], "must": STRAY, "by": st["t"] + STRAY_WITHIN_S, "why": "stray process"}
        )
    return out


def score(truth: dict, transitions: list[dict], header: dict) -> dict:
    """Judge one trace. `fail` lists the gating reasons; `notes` what is reported but not gated."""
    fires = firing_episodes(transitions)
    end = truth["duration"]
    fail, notes = [], []
    r = {
        "false_pages": 0,
        "false_leaks": 0,
        "ooms": 0,
        "missed_ooms": 0,
        "leads": [],
        "lead_fracs": [],
        "flaps": 0,
        "refires": 0,
        "slow_flag_s": [],
        "missed_slow": 0,
        "missed_leaks": 0,
        "missing_strays": 0,
        "false_strays": 0,
        "episodes_fired": len(fires),
        "page_episodes": sum(f["alert"] == PAGE for f in fires),
    }
    for g in header["gpus"]:
        i, total = g["index"], g["total"]
        eps = [e for e in truth["episodes"] if e["gpu"] == i]
        on = [f for f in fires if f["gpu"] == str(i)]
        for alert, t_resolved, t_again in refires(on, [e["oom"] for e in eps if e["oom"] is not None]):
            r["refires"] += 1
            gap = t_again - t_resolved
            notes.append(f"{alert} fired again on GPU {i} at {t_again:.0f} s, {gap:.0f} s after it resolved")
        wins = [(e["onset"], (e["end"] if e["end"] is not None else end) + GRACE_S) for e in eps]
        for f in on:
            if f["alert"] == LEAK and not truth.get("judge_leaks", True):
                continue
            if f["alert"] in (PAGE, LEAK) and not any(a <= f["start"] <= b for a, b in wins):
                what = "false page" if f["alert"] == PAGE else "false leak warning"
                r["false_pages" if f["alert"] == PAGE else "false_leaks"] += 1
                fail.append(f"{what} on GPU {i} at {f['start']:.0f} s" + ("" if eps else " (healthy card)"))
        for e in eps:
            oom, onset = e["oom"], e["onset"]
            pages = [f["start"] for f in on if f["alert"] == PAGE and onset <= f["start"] < (oom or end + 1)]
            if oom is not None:
                r["ooms"] += 1
                if e["kind"] == "spike":
                    warned = [
                        f
                        for f in on
                        if f["alert"] in (PAGE, SPIKE)
                        and f["start"] < oom
                        and (f["end"] is None or f["end"] >= oom - SPIKE_WARN_S)
                    ]
                    if not warned:
                        r["missed_ooms"] += 1
                        fail.append(f"missed OOM at {oom:.0f} s on GPU {i} (spike: no spike-risk or page before it)")
                    continue
                span = oom - onset
                floor = min(OOM_LEAD_MAX_S, 0.5 * span)
                if not pages:
                    r["missed_ooms"] += 1
                    fail.append(f"missed OOM at {oom:.0f} s on GPU {i} (no page in the {span:.0f} s from onset)")
                else:
                    lead = oom - min(pages)
                    r["leads"].append(lead)
                    r["lead_fracs"].append(lead / span if span > 0 else 1.0)
                    if lead < floor:
                        fail.append(
                            f"lead {lead:.0f} s before the OOM at {oom:.0f} s on GPU {i} is below "
                            f"the floor {floor:.0f} s"
                        )
                n_pages = sum(1 for f in on if f["alert"] == PAGE and onset <= f["start"] <= oom + GRACE_S)
                if n_pages > 1:
                    r["flaps"] += 1
                    notes.append(f"{n_pages} page episodes for one OOM on GPU {i}")
                if e["kind"] == "leak" and not any(f["alert"] == LEAK and onset <= f["start"] < oom for f in on):
                    r["missed_leaks"] += 1
                    fail.append(
                        f"no GPUMemoryLeak before the OOM at {oom:.0f} s on GPU {i} ({e['pattern']} from {onset:.0f} s)"
                    )
            elif e["kind"] == "leak":
                vis = e.get("visible", onset)
                dl = slow_deadline(e, total)
                stop = e["end"] if e["end"] is not None else end
                flags = [f["start"] for f in on if f["alert"] == LEAK and onset <= f["start"] <= vis + dl]
                if flags:
                    r["slow_flag_s"].append(min(flags) - onset)
                elif vis + dl <= stop:
                    r["missed_slow"] += 1
                    fail.append(
                        f"missed slow leak on GPU {i}: no GPUMemoryLeak within {dl / 3600:.1f} h of {vis:.0f} s"
                    )
                else:
                    notes.append(f"leak on GPU {i} not judged: the trace ends before its deadline")
    want = {(s["pid"]) for s in truth["strays"]}
    for s in truth["strays"]:
        if not any(
            f["alert"] == STRAY and f["pid"] == str(s["pid"]) and f["start"] <= s["t"] + STRAY_WITHIN_S for f in fires
        ):
            r["missing_strays"] += 1
            fail.append(f"no GPUStrayProcess for stray pid {s['pid']} within {STRAY_WITHIN_S:.0f} s")
    for f in fires:
        if f["alert"] == STRAY and f["pid"] is not None and int(f["pid"]) not in want:
            r["false_strays"] += 1
            notes.append(f"GPUStrayProcess for pid {f['pid']} (not a stray) at {f['start']:.0f} s")
    imb = any(f["alert"] == IMBALANCE for f in fires)
    if truth.get("imbalance") and not imb:
        notes.append("imbalance expected, GPUMemoryImbalance never fired")
    elif not truth.get("imbalance") and imb:
        notes.append("GPUMemoryImbalance fired, no imbalance expected")
    if truth.get("labels") is not None:
        lf, ln = score_labels(truth, fires)
        fail += [x for x in lf if x not in fail]
        notes += ln
    r["fail"], r["notes"] = fail, notes
    return r


def run_name(item: str) -> str:
    """A trace's name in the reports: the scenario's, or `source: file name`."""
    src = source_of(item)
    return item if src == "project" else f"{src}: " + os.path.basename(item)[:-6]


def run_one(item: str, transform=None) -> dict:
    src = source_of(item)
    name = run_name(item)
    try:
        truth, trans, n, dt, header, summary = _replay(item, transform)
    except Exception as e:  # noqa: BLE001  an analysis that raises fails its trace; the others still run
        return {"name": name, "item": item, "error": f"{type(e).__name__}: {e}"}
    r = score(truth, trans, header)
    sf, sn = score_summary(truth, summary, header)
    r["fail"] += sf
    r["notes"] += sn
    r["passed_summary"] = not sf
    r.update(
        name=name,
        item=item,
        source=src,
        expect=expectations(truth, header),
        samples=n,
        gpus=len(header["gpus"]),
        gpu_samples=n * len(header["gpus"]),
        feed_s=dt,
        duration_s=truth["duration"],
        hz=header.get("sample_hz"),
        card=header["gpus"][0]["name"],
        healthy_gpus=sum(1 for g in header["gpus"] if not any(e["gpu"] == g["index"] for e in truth["episodes"])),
        passed=not r["fail"],
    )
    return r


# ---- totals and report ------------------------------------------------------------------------------
def totals(results: list[dict]) -> dict:
    ch = sum(r["gpus"] * r["duration_s"] for r in results) / 3600
    hch = sum(r["healthy_gpus"] * r["duration_s"] for r in results) / 3600
    leads, fr, slow = (sum((r[k] for r in results), []) for k in ("leads", "lead_fracs", "slow_flag_s"))
    feed = sum(r["feed_s"] for r in results)
    s = lambda k: sum(r[k] for r in results)  # noqa: E731
    return {
        "traces": len(results),
        "passed": sum(r["passed"] for r in results),
        "card_hours": round(ch, 2),
        "healthy_card_hours": round(hch, 2),
        "gpu_samples": s("gpu_samples"),
        "false_pages": s("false_pages"),
        "false_pages_per_card_hour": round(s("false_pages") / ch, 4) if ch else 0,
        "false_leaks": s("false_leaks"),
        "false_leaks_per_card_hour": round(s("false_leaks") / ch, 4) if ch else 0,
        "firing_episodes_per_card_hour": round(s("episodes_fired") / ch, 3) if ch else 0,
        "page_episodes_per_card_hour": round(s("page_episodes") / ch, 3) if ch else 0,
        "ooms": s("ooms"),
        "missed_ooms": s("missed_ooms"),
        "flapping_ooms": s("flaps"),
        "refires": s("refires"),
        "missed_leaks": s("missed_leaks"),
        "missed_slow_leaks": s("missed_slow"),
        "missing_strays": s("missing_strays"),
        "false_strays": s("false_strays"),
        "lead_s_median": round(statistics.median(leads), 1) if leads else None,
        "lead_s_worst": round(min(leads), 1) if leads else None,
        "lead_fraction_median": round(statistics.median(fr), 3) if fr else None,
        "lead_fraction_worst": round(min(fr), 3) if fr else None,
        "slow_leak_flag_s_median": round(statistics.median(slow), 1) if slow else None,
        "slow_leak_flag_s_worst": round(max(slow), 1) if slow else None,
        "gpu_samples_per_second": round(s("gpu_samples") / feed) if feed else None,
    }


def _grouped(reasons: list[str]) -> str:
    """ "false page x9 (first: false page on GPU 0 at 36 s); ..." - one entry per kind of reason."""
    kinds: dict[str, list[str]] = {}
    for why in reasons:
        kinds.setdefault(" ".join(why.split()[:2]), []).append(why)
    return "; ".join(v[0] if len(v) == 1 else f"{len(v)}x {k} (first: {v[0]})" for k, v in kinds.items())


def _h(sec: float) -> str:
    if sec < 2 * 3600:
        return f"{sec / 60:.0f} min"
    return f"{sec / 3600:.0f} h" if sec < 72 * 3600 else f"{sec / 86400:.0f} d"


COVERAGE = """## What the corpus covers, and what it does not
Three sources, reported apart (a rule tuned to one generator shows up as a loss on the others):
- the project's generator (`bench/scenarios`, built from BEHAVIOURS.md at its time scales): vLLM V0/V1,
  SGLang, Hugging Face apps under uvicorn, TGI, Triton, TensorRT-LLM, notebooks, MPS and several tenants;
  starts of 20 s to 10 min with and without a utilisation flag; dynamic KV caches and continuous batching
  whose pool is taken and given back; caching-allocator growth that levels off; empty_cache sawtooths;
  hourly and daily load cycles without a pool; hot-swaps, reloads that ratchet, lazy NCCL buffers, vLLM
  sleep/wake and RL colocation, LoRA adapters with and without a cap; restarts and crash loops; orphans
  and strays; leaks from 5 MB/h to GB/s on one rank or all, under a warm cache, at 95% of 16-24 GB cards;
  spike OOMs; 1 to 8 cards of 16 to 141 GB; 0.2 to 10 Hz;
- the second, independent generator (`../shared/generators`), judged by its own labels;
- every real recording: `../shared/traces` (H200, real CUDA OOMs) and the project's own in
  `bench/results` (allocator-probe runs, the live daemon, and real inference through transformers'
  `generate()` and continuous batching on a 7B-shaped model, `bench/gpu_serve.py`).

Not covered: engine metrics (no `/metrics` snapshots in the traces, so KV pressure and engine-aware
warm-up are not exercised here), host RAM leaks, MIG, daemon restarts with saved state, NVML errors and
gaps, PID reuse, clock jumps. Any leak warning or page inside a true episode counts as detecting it; the
healthy twins are what punish a detector that fires on the pattern rather than the leak. Traces held back
for evaluation judge the analysis too: passing here is necessary, not sufficient.
"""


#: The same corpus (all three sources) through the analysis at 0f5e3e5 (analysis v2, before Detection v3),
#: measured with this scorer in one run: the comparison the report prints by source.
BASELINE = {
    "commit": "0f5e3e5",
    "by_source": {
        "project": {"passed": "87 / 102", "false_pages": 10, "false_leaks": 20, "missed_ooms": "3 / 54"},
        "second": {"passed": "6 / 10", "false_pages": 2, "false_leaks": 3, "missed_ooms": "1 / 2"},
        "real": {"passed": "22 / 32", "false_pages": 7, "false_leaks": 5, "missed_ooms": "4 / 15"},
    },
}


def _baseline(results: list[dict]) -> list[str]:
    out = [
        "",
        f"### Against the analysis at {BASELINE['commit']} (same corpus, same scorer)",
        "",
        "| source | traces passed | false pages | false leak warnings | OOMs missed |",
        "|---|---|---|---|---|",
    ]
    for k, then in BASELINE["by_source"].items():
        g = [r for r in results if r.get("source") == k]
        if not g:
            continue
        t = totals(g)
        out.append(
            f"| {k} | {then['passed']} -> {t['passed']} / {t['traces']} | {then['false_pages']} -> "
            f"{t['false_pages']} | {then['false_leaks']} -> {t['false_leaks']} | {then['missed_ooms']} -> "
            f"{t['missed_ooms']} / {t['ooms']} |"
        )
    return out


def _by_source(results: list[dict]) -> list[str]:
    """The totals of each source apart: a rule tuned to one generator shows up as a loss on the others."""
    names = {
        "project": "project generator",
        "second": "second generator",
        "real": "real recordings",
    }
    groups = [(k, [r for r in results if r.get("source") == k]) for k in SOURCES]
    groups = [(k, g) for k, g in groups if g]
    tots = [(k, totals(g)) for k, g in groups]
    rows = [
        ("traces passed", lambda t: f"{t['passed']} / {t['traces']}"),
        ("card-hours", lambda t: t["card_hours"]),
        ("false pages", lambda t: t["false_pages"]),
        ("false leak warnings", lambda t: t["false_leaks"]),
        ("OOMs missed / all", lambda t: f"{t['missed_ooms']} / {t['ooms']}"),
        (f"alerts fired again within {REFIRE_S / 60:.0f} min (flaps)", lambda t: t["refires"]),
        ("lead before OOM, median / worst (s)", lambda t: f"{t['lead_s_median']} / {t['lead_s_worst']}"),
        ("slow leaks missed", lambda t: t["missed_slow_leaks"]),
        ("strays missed / alerts on non-strays", lambda t: f"{t['missing_strays']} / {t['false_strays']}"),
    ]
    out = [
        "",
        "### By source",
        "",
        "| measure | " + " | ".join(names[k] for k, _ in tots) + " |",
        "|---|" + "---|" * len(tots),
    ]
    out += [f"| {name} | " + " | ".join(str(f(t)) for _, t in tots) + " |" for name, f in rows]
    return out


def report(
    results: list[dict], tot: dict, cmd: str, wall: float, title: str, skipped: list[str], baseline: bool = False
) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    mach = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    out = [
        f"# Detection benchmark: {title}",
        "",
        f"{now}, {mach}, `{cmd}` ({wall:.0f} s wall, 2 worker processes on a machine shared with other "
        "work). Regenerate with the same command.",
        "",
        "Every trace goes through exactly what `oomwatch replay` runs; the scorer alone reads the truth "
        "(the generator's, or a recording's own annotations). Gating (a trace fails on any): a page "
        "(GPUOOMImminent) on a healthy card or outside a true episode, a leak warning outside a true "
        "episode, an OOM without a page between the leak's onset and the OOM, a lead below "
        f"min({OOM_LEAD_MAX_S:.0f} s, half the leak span), an OOM from a leak without GPUMemoryLeak "
        "before it, a leak that never reaches OOM unflagged by its deadline, a stray without "
        "GPUStrayProcess. A spike OOM needs a spike-risk warning or a page active in the "
        f"{SPIKE_WARN_S:.0f} s before it. Reported, not gated: several page episodes for one OOM, strays "
        "alerted on a non-stray PID, imbalance, "
        f"an alert of a card fired again within {REFIRE_S / 60:.0f} min of resolving with no OOM between (a flap).",
        "",
        "## Totals",
        "",
        "| measure | value |",
        "|---|---|",
    ]
    rows = [
        ("traces passed", f"{tot['passed']} / {tot['traces']}"),
        ("card-hours (healthy card-hours)", f"{tot['card_hours']} ({tot['healthy_card_hours']})"),
        ("false pages (per card-hour)", f"{tot['false_pages']} ({tot['false_pages_per_card_hour']})"),
        ("false leak warnings (per card-hour)", f"{tot['false_leaks']} ({tot['false_leaks_per_card_hour']})"),
        (
            "firing episodes per card-hour, all alerts (pages)",
            f"{tot['firing_episodes_per_card_hour']} ({tot['page_episodes_per_card_hour']})",
        ),
        ("OOMs missed / all", f"{tot['missed_ooms']} / {tot['ooms']}"),
        ("OOMs paged more than once (flapping)", tot["flapping_ooms"]),
        (f"alerts fired again within {REFIRE_S / 60:.0f} min of resolving, no OOM between (flaps)", tot["refires"]),
        ("OOMs from a leak without GPUMemoryLeak before them", tot["missed_leaks"]),
        ("lead before OOM, median / worst (s)", f"{tot['lead_s_median']} / {tot['lead_s_worst']}"),
        (
            "lead as a fraction of the leak span, median / worst",
            f"{tot['lead_fraction_median']} / {tot['lead_fraction_worst']}",
        ),
        ("slow leaks missed", tot["missed_slow_leaks"]),
        (
            "time to flag slow leaks, median / worst (s)",
            f"{tot['slow_leak_flag_s_median']} / {tot['slow_leak_flag_s_worst']}",
        ),
        ("strays missed / alerts on non-strays", f"{tot['missing_strays']} / {tot['false_strays']}"),
        (
            "analysis throughput (GPU-samples/s, feeding only, one process per trace; a lower bound on a busy machine)",
            tot["gpu_samples_per_second"],
        ),
        ("corpus size (GPU-samples)", tot["gpu_samples"]),
    ]
    out += [f"| {a} | {b} |" for a, b in rows]
    out += _by_source(results)
    out += [
        "",
        f"Rates are per card-hour of all {tot['card_hours']} card-hours. The CI subset "
        f"(`--fast`, tests/test_detection.py): {', '.join(FAST)}, and the real traces.",
    ]
    if baseline:
        out += _baseline(results)
    out += [
        "",
        "## Per trace",
        "",
        "| trace | cards | length | Hz | GPU-samples | result | why (gating) | notes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        why = _grouped(r["fail"])
        notes = _grouped(r["notes"])
        out.append(
            f"| {r['name']} | {r['gpus']}x {r['card']} | {_h(r['duration_s'])} | {r['hz']} | "
            f"{r['gpu_samples']} | "
            f"{'pass' if r['passed'] else '**fail**'} | {why} | {notes} |"
        )
    if skipped:
        out += ["", "Skipped: " + "; ".join(skipped)]
    out += ["", "## Scenarios", ""]
    out += [
        f"- `{n}` ({len(sp.cards)}x {sp.cards[0]}, {_h(sp.duration)}, {sp.hz} Hz): {sp.note}"
        for n, sp in SCENARIOS.items()
        if any(r["name"].partition("#")[0] == n for r in results)
    ]
    out += ["", COVERAGE]
    return "\n".join(out) + "\n"


def items_for(a) -> tuple[list[str], list[str]]:
    skipped = []
    if a.only:
        return a.only, skipped
    names = list(FAST) if a.fast else list(SCENARIOS)
    if a.reseed:  # recordings have one draw: only the generators can be drawn again
        names = [f"{n}#{a.reseed}" for n in names]
        reals = []
        skipped.append("real recordings: a recording cannot be drawn from another seed")
    else:
        reals = real_traces()
        if not glob.glob(os.path.join(SHARED_TRACES, "*.jsonl")):
            skipped.append(f"real traces: {os.path.join('..', 'shared', 'traces')} is absent")
    seconds = second_traces(a.reseed)
    if not seconds:
        skipped.append(f"second generator: {os.path.join('..', 'shared', 'generators')} is absent")
    return names + seconds + reals, skipped


DEFAULT_OUT = os.path.join(ROOT, "bench", "DETECTION.md")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python bench/detection.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--fast", action="store_true", help="only the CI subset (plus the real traces)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="only these scenarios or trace files")
    ap.add_argument("--out", default=DEFAULT_OUT, help="the Markdown report")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--title", default="the current analysis")
    ap.add_argument(
        "--reseed",
        type=int,
        default=0,
        metavar="K",
        help="draw both generators' scenarios from their K-th other seed (the recordings are left out): does a "
        "verdict hold beyond the one draw it was tuned on? Writes bench/.cache/DETECTION_reseedK.md unless --out",
    )
    a = ap.parse_args(argv)
    if a.reseed < 0:
        print("--reseed: K must be 0 or more", file=sys.stderr)
        return 2
    if a.reseed and a.out == DEFAULT_OUT:
        a.out = os.path.join(ROOT, "bench", ".cache", f"DETECTION_reseed{a.reseed}.md")
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
    items, skipped = items_for(a)
    bad = [i for i in items if scenario_of(i) is None and not os.path.isfile(i)]
    if bad:
        print(f"unknown scenario or missing trace: {bad[0]}", file=sys.stderr)
        return 2
    cost = {i: sc[0].gpu_samples if (sc := scenario_of(i)) else os.path.getsize(i) // 150 for i in items}
    order = sorted(items, key=lambda i: -cost[i])
    t0 = time.perf_counter()
    results = []
    with multiprocessing.get_context("fork").Pool(max(1, a.jobs)) as pool:
        for k, r in enumerate(pool.imap_unordered(run_one, order), 1):
            results.append(r)
            if "error" in r:
                print(f"[{k}/{len(order)}] {r['name']}: ERROR {r['error']}", file=sys.stderr)
                continue
            print(
                f"[{k}/{len(order)}] {r['name']}: {'pass' if r['passed'] else 'FAIL'} "
                f"({r['gpu_samples']} GPU-samples, {r['feed_s']:.1f} s)",
                file=sys.stderr,
            )
    wall = time.perf_counter() - t0
    rank = {i: k for k, i in enumerate(items)}
    results.sort(key=lambda r: rank[r["item"]])
    errors = [r for r in results if "error" in r]
    for r in errors:
        print(f"{r['name']}: the analysis raised {r['error']}", file=sys.stderr)
    if errors:
        return 1
    tot = totals(results)
    cmd = (
        "python bench/detection.py"
        + (" --fast" if a.fast else "")
        + (" --only " + " ".join(a.only) if a.only else "")
        + (f" --jobs {a.jobs}" if a.jobs != 2 else "")
        + (f" --reseed {a.reseed}" if a.reseed else "")
    )
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(report(results, tot, cmd, wall, a.title, skipped, baseline=not a.only and not a.fast and not a.reseed))
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "totals": tot,
                    "wall_s": round(wall, 1),
                    "command": cmd,
                    "results": [{k: v for k, v in r.items() if k != "item"} for r in results],
                },
                f,
                indent=1,
            )
    print(
        f"{tot['passed']}/{tot['traces']} passed, {tot['false_pages']} false pages, {tot['missed_ooms']}/"
        f"{tot['ooms']} OOMs missed, {wall:.0f} s; wrote {a.out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
