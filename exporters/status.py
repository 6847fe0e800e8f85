"""The built-in status page (`/`) and its JSON (`/api/v1/status`): the curve without Grafana.

One self-contained page (no CDN, no outside fetch: sidecars often run offline) that polls the JSON every
two seconds and draws each card's last 15 minutes (the "15m" history window; buttons switch to the last
6 hours or 7 days, where slow leaks show) as an SVG line against the card's capacity and the engine's budget
line, with each card's phase and one sentence of its state, and the latest alert episodes (what fired when,
on what evidence, how it ended). Read-only; no command lines (process names and roles only). It reads only
the sampler's immutable snapshot.

`/api/v1/status` (stable keys; new ones may be added):
    t, wall            analysis time of the snapshot and its unix time
    samples            samples analysed since start
    gpus[]             gpu, name, uuid, total_bytes, capacity_bytes, used_bytes, budget_bytes, shape, leak,
                       leak_bytes_per_second, eta_seconds, eta_text, spike_risk, processes[] (pid, name,
                       role, used_bytes), allocator[] (the in-process probe, per process: pid, role,
                       allocated_bytes, reserved_bytes, inactive_split_bytes, alloc_retries, ooms, verdict =
                       ok|cache_growth|leak|retries) and history: {window, window_seconds, seconds_ago[]
                       (>= 0, oldest first), used_bytes[]} for the "15m" window; phase
                       (idle|starting|serving|exiting) and verdict (one sentence of the state now)
    episodes[]         the latest alert episodes (alert, gpu, pid, start, end, shape, leak_bytes_per_second,
                       eta_seconds, evidence, ended_because; times in analysis seconds like `t`)
    alerts[]           labels, state, summary, runbook_url, since (unix time it became active)
    sources[], sinks[] source|sink, up, error
    findings[]         the findings entries of `oomwatch replay --json`

`/api/v1/history/<window>` (window: 15m, 6h or 7d): {window, window_seconds, gpus[] (gpu, total_bytes,
capacity_bytes, budget_bytes, seconds_ago[], used_bytes[])}: the same curve over a longer span, fetched
only when the page shows it (a week of points every two seconds would be wasted bytes).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from oomwatch.snapshot import Snapshot
from oomwatch.words import duration

__all__ = ["PAGE", "WINDOW", "WINDOWS", "history", "routes", "status"]

#: The history window the page draws by default, and those it can switch to (the snapshot carries each).
WINDOW = "15m"
WINDOWS = ("15m", "6h", "7d")


def _curve(h: Any) -> dict[str, Any]:
    t, used = (h.t, h.used_bytes) if h is not None else ((), ())
    t_end = t[-1] if t else 0.0
    return {
        "window_seconds": h.seconds if h is not None else None,
        "seconds_ago": [round(t_end - x, 2) for x in t],
        "used_bytes": list(used),
    }


def history(snap: Snapshot, window: str) -> dict[str, Any]:
    """The JSON of `/api/v1/history/<window>`: every card's curve over that window."""
    cards = []
    for g in snap.gpus:
        c = _curve(g.window(window))
        cards.append(
            {
                "gpu": str(g.info.index),
                "total_bytes": g.info.total_bytes,
                "capacity_bytes": g.capacity_bytes,
                "budget_bytes": g.budget_bytes,
                "seconds_ago": c["seconds_ago"],
                "used_bytes": c["used_bytes"],
            }
        )
    secs = next((h.seconds for g in snap.gpus for h in g.history if h.window == window), None)
    return {"window": window, "window_seconds": secs, "gpus": cards}


def status(snap: Snapshot) -> dict[str, Any]:
    """The JSON of `/api/v1/status` from one snapshot."""
    s = snap
    cards = []
    for g in s.gpus:
        v = g.verdict
        curve = _curve(g.window(WINDOW))
        cards.append(
            {
                "gpu": str(g.info.index),
                "name": g.info.name,
                "uuid": g.info.uuid,
                "total_bytes": g.info.total_bytes,
                "capacity_bytes": g.capacity_bytes,
                "used_bytes": None if g.sample is None else g.sample.used_bytes,
                "budget_bytes": g.budget_bytes,
                "shape": v.shape,
                "leak": v.leak,
                "leak_bytes_per_second": v.leak_bytes_per_second,
                "eta_seconds": v.eta_seconds,
                "eta_text": duration(v.eta_seconds) if v.eta_seconds is not None else None,
                "spike_risk": v.spike_risk,
                "phase": g.phase,
                "verdict": g.verdict_text,
                "history": {"window": WINDOW, **curve},
                "processes": [
                    {"pid": p.pid, "name": p.name, "role": p.role, "used_bytes": p.used_bytes}
                    for p in s.procs
                    if p.gpu == str(g.info.index)
                ],
                "allocator": [
                    {
                        "pid": a.pid,
                        "role": a.role,
                        "allocated_bytes": a.allocated_bytes,
                        "reserved_bytes": a.reserved_bytes,
                        "inactive_split_bytes": a.inactive_split_bytes,
                        "alloc_retries": a.alloc_retries,
                        "ooms": a.ooms,
                        "verdict": a.verdict,
                    }
                    for a in getattr(s, "allocs", ())
                    if a.gpu == str(g.info.index)
                ],
            }
        )
    return {
        "t": s.t,
        "wall": s.wall,
        "samples": s.samples_total,
        "gpus": cards,
        "alerts": [
            {
                "labels": dict(a.labels),
                "state": a.state,
                "summary": a.annotations.get("summary"),
                "runbook_url": a.annotations.get("runbook_url"),
                "since": a.active_since_wall,
            }
            for a in s.alerts
        ],
        "sources": [{"source": x.name, "up": x.up, "error": x.error} for x in s.sources],
        "sinks": [{"sink": x.name, "up": x.up, "error": x.error} for x in s.sinks],
        "findings": [f.to_json() for f in s.findings],
        "episodes": [dict(e) for e in s.episodes],
    }


PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>oomwatch</title>
<meta name="viewport" content="width=device-width,initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:16px;background:#fafafa;color:#222}
h1{font-size:18px;margin:0 0 8px} .card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px;margin:0 0 12px}
.ok{color:#1a7f37}.warn{color:#b35900}.crit{color:#c62828;font-weight:bold}
.num{font-size:20px;font-weight:600;margin-right:18px} svg{width:100%;height:140px;background:#fcfcfc}
table{border-collapse:collapse} td{padding:1px 10px 1px 0} .down{background:#fdecea;padding:6px;border-radius:4px}
</style></head><body><h1>oomwatch</h1><div id="windows">window: <button data-w="15m">15 min</button> <button data-w="6h">6 h</button> <button data-w="7d">7 days</button></div><div id="alerts"></div><div id="sources"></div><div id="cards">loading...</div><div id="episodes"></div>
<script>
const GiB=1073741824;function g(b){return b==null?'n/a':(b/GiB).toFixed(1)+' GiB'}
function esc(s){return String(s).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]))}
function span(s){return s>=5400?(s/3600).toFixed(1)+' h':s>=90?Math.round(s/60)+' min':Math.round(s)+' s'}
function plot(c){const h=c.history,W=600,H=140,cap=c.capacity_bytes||c.total_bytes;if(!h.seconds_ago.length)return'';
const x0=h.window_seconds||Math.max(60,h.seconds_ago[0]);const X=s=>W*(1-s/x0),Y=b=>H-H*b/(cap*1.05);
let d=h.seconds_ago.map((s,i)=>(i?'L':'M')+X(s).toFixed(1)+','+Y(h.used_bytes[i]).toFixed(1)).join('');
let s=`<svg viewBox="0 0 ${W} ${H}" preserveAspectRatio="none"><line x1="0" x2="${W}" y1="${Y(cap)}" y2="${Y(cap)}" stroke="#c62828" stroke-dasharray="4"/>`;
if(c.budget_bytes)s+=`<line x1="0" x2="${W}" y1="${Y(c.budget_bytes)}" y2="${Y(c.budget_bytes)}" stroke="#888" stroke-dasharray="2"/>`;
return s+`<path d="${d}" fill="none" stroke="#1565c0" stroke-width="1.5"/></svg><small>last ${span(x0)}; red: capacity, grey: engine budget</small>`}
let win='15m';document.querySelectorAll('#windows button').forEach(b=>b.onclick=()=>{win=b.dataset.w;tick()});
async function tick(){try{const r=await fetch('api/v1/status');const j=await r.json();
if(win!='15m'){const hr=await fetch('api/v1/history/'+win);const hj=await hr.json();const by={};hj.gpus.forEach(x=>by[x.gpu]=x);
j.gpus.forEach(c=>{const x=by[c.gpu];if(x)c.history={window:win,window_seconds:hj.window_seconds,seconds_ago:x.seconds_ago,used_bytes:x.used_bytes}})}
document.getElementById('alerts').innerHTML=j.alerts.filter(a=>a.state=='firing').map(a=>`<div class="card ${a.labels.severity=='critical'?'crit':'warn'}">FIRING ${esc(a.labels.alertname)}: ${esc(a.summary)} <a href="${esc(a.runbook_url)}">runbook</a></div>`).join('')||'<div class="card ok">No alert firing</div>';
document.getElementById('sources').innerHTML=j.sources.filter(s=>!s.up).map(s=>`<div class="down">source ${esc(s.source)} down: ${esc(s.error||'')}</div>`).join('')+(j.sinks||[]).filter(s=>!s.up).map(s=>`<div class="down">sink ${esc(s.sink)} down: ${esc(s.error||'')}</div>`).join('');
document.getElementById('cards').innerHTML=j.gpus.map(c=>{const cap=c.capacity_bytes||c.total_bytes;const pct=c.used_bytes==null?'n/a':(100*c.used_bytes/cap).toFixed(1)+'%';
const cls=c.eta_seconds!=null?'crit':(c.leak||c.spike_risk?'warn':'ok');
return `<div class="card" data-gpu="${c.gpu}"><b>GPU ${c.gpu}</b> ${esc(c.name)}<br><span class="num">${pct}</span><span class="num">${g(c.used_bytes)} / ${g(cap)}</span>
<span class="num ${cls}">${esc(c.shape)}${c.leak?' leak '+(c.leak_bytes_per_second/1048576).toFixed(0)+' MiB/s':''}</span>
<span class="num ${cls}">${c.eta_text?'OOM in '+c.eta_text:'no leak'}</span>${c.spike_risk?'<span class="num warn">spike risk</span>':''}
<div class="verdict">${esc(c.phase||'')}: ${esc(c.verdict||'')}</div>${plot(c)}
<table>${c.processes.map(p=>`<tr><td>${p.pid}</td><td>${esc(p.name)}</td><td class="${p.role=='stray'?'crit':''}">${p.role}</td><td>${g(p.used_bytes)}</td></tr>`).join('')}</table>${(c.allocator||[]).map(a=>`<div class="alloc ${a.verdict=='ok'?'ok':(a.verdict=='cache_growth'?'warn':'crit')}">PID ${a.pid} allocator: live tensors ${g(a.allocated_bytes)}, reserved ${g(a.reserved_bytes)} (cache ${g(a.reserved_bytes-a.allocated_bytes)}), split ${g(a.inactive_split_bytes)}, retries ${a.alloc_retries}, OOMs ${a.ooms}: ${esc(a.verdict.replace('_',' '))}</div>`).join('')}</div>`}).join('');document.getElementById('episodes').innerHTML=(j.episodes||[]).length?'<div class="card"><b>Episodes</b><table>'+j.episodes.slice().reverse().map(e=>`<tr><td>${esc(e.alert)}</td><td>GPU ${esc(e.gpu)}</td><td>${span(j.t-e.start)} ago, ${e.end!=null?'for '+span(e.end-e.start):'firing'}</td><td>${esc(e.evidence||'')}</td><td>${esc(e.ended_because||'')}</td></tr>`).join('')+'</table></div>':''}
catch(e){document.getElementById('sources').innerHTML='<div class="down">oomwatch not answering ('+esc(e)+')</div>'}}
tick();setInterval(tick,2000);
</script></body></html>"""


def routes(get_snapshot: Callable[[], Snapshot] | Any) -> dict[str, Callable[[], tuple[str, bytes]]]:
    """The page's routes for `oomwatch.exporters.metrics.serve`: `get_snapshot()` returns the latest snapshot (an
    object with a `snapshot` attribute, such as the sampler, is read the same way)."""
    get = get_snapshot if callable(get_snapshot) else (lambda: get_snapshot.snapshot)
    return {
        "/": lambda: ("text/html; charset=utf-8", PAGE.encode()),
        "/api/v1/status": lambda: ("application/json", json.dumps(status(get())).encode()),
        **{f"/api/v1/history/{w}": _history_route(get, w) for w in WINDOWS},
    }


def _history_route(get: Callable[[], Snapshot], window: str) -> Callable[[], tuple[str, bytes]]:
    return lambda: ("application/json", json.dumps(history(get(), window)).encode())
