"""The built-in status page (`/`) and its JSON (`/api/v1/status`): the curve without Grafana.

One self-contained page (no CDN, no outside fetch: sidecars often run offline) that polls the JSON every
two seconds and draws each card's last 15 minutes as an SVG line against the card's capacity and the
engine's budget line. Read-only; no command lines (process names and roles only).
"""

from __future__ import annotations

import json

from daemon.analysis.findings import duration


def status(sampler) -> dict:
    """The documented JSON of `/api/v1/status` (see docs/status-api.md)."""
    s = sampler.snapshot
    cards = []
    for g in s.gpus:
        v = g.verdict
        t, used = sampler.history(g.info.index)
        step = max(1, len(t) // 600)
        t0 = t[-1] if t else 0.0
        cards.append({
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
            "history": {"seconds_ago": [round(x - t0, 2) for x in t[::step]], "used_bytes": used[::step]},
            "processes": [
                {"pid": p.pid, "name": p.name, "role": p.role, "used_bytes": p.used_bytes}
                for p in s.procs if p.gpu == str(g.info.index)
            ],
        })
    return {
        "t": s.t,
        "samples": s.samples_total,
        "gpus": cards,
        "alerts": [
            {"labels": a.labels, "state": a.state, "summary": a.annotations.get("summary"),
             "runbook_url": a.annotations.get("runbook_url")}
            for a in s.alerts
        ],
        "sources": [{"source": x.name, "up": x.up, "error": x.error} for x in s.sources],
        "findings": [f.to_json() for f in s.findings],
    }


PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>oomwatch</title>
<meta name="viewport" content="width=device-width,initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:16px;background:#fafafa;color:#222}
h1{font-size:18px;margin:0 0 8px} .card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px;margin:0 0 12px}
.ok{color:#1a7f37}.warn{color:#b35900}.crit{color:#c62828;font-weight:bold}
.num{font-size:20px;font-weight:600;margin-right:18px} svg{width:100%;height:140px;background:#fcfcfc}
table{border-collapse:collapse} td{padding:1px 10px 1px 0} .down{background:#fdecea;padding:6px;border-radius:4px}
</style></head><body><h1>oomwatch</h1><div id="alerts"></div><div id="sources"></div><div id="cards">loading...</div>
<script>
const GiB=1073741824;function g(b){return b==null?'n/a':(b/GiB).toFixed(1)+' GiB'}
function esc(s){return String(s).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]))}
function plot(c){const h=c.history,W=600,H=140,cap=c.capacity_bytes||c.total_bytes;if(!h.seconds_ago.length)return'';
const x0=Math.min(-60,h.seconds_ago[0]);const X=s=>W*(1-s/x0),Y=b=>H-H*b/(cap*1.05);
let d=h.seconds_ago.map((s,i)=>(i?'L':'M')+X(s).toFixed(1)+','+Y(h.used_bytes[i]).toFixed(1)).join('');
let s=`<svg viewBox="0 0 ${W} ${H}" preserveAspectRatio="none"><line x1="0" x2="${W}" y1="${Y(cap)}" y2="${Y(cap)}" stroke="#c62828" stroke-dasharray="4"/>`;
if(c.budget_bytes)s+=`<line x1="0" x2="${W}" y1="${Y(c.budget_bytes)}" y2="${Y(c.budget_bytes)}" stroke="#888" stroke-dasharray="2"/>`;
return s+`<path d="${d}" fill="none" stroke="#1565c0" stroke-width="1.5"/></svg><small>last ${Math.round(-x0)} s; red: capacity, grey: engine budget</small>`}
async function tick(){try{const r=await fetch('api/v1/status');const j=await r.json();
document.getElementById('alerts').innerHTML=j.alerts.filter(a=>a.state=='firing').map(a=>`<div class="card ${a.labels.severity=='critical'?'crit':'warn'}">FIRING ${esc(a.labels.alertname)}: ${esc(a.summary)} <a href="${esc(a.runbook_url)}">runbook</a></div>`).join('')||'<div class="card ok">No alert firing</div>';
document.getElementById('sources').innerHTML=j.sources.filter(s=>!s.up).map(s=>`<div class="down">source ${esc(s.source)} down: ${esc(s.error||'')}</div>`).join('');
document.getElementById('cards').innerHTML=j.gpus.map(c=>{const cap=c.capacity_bytes||c.total_bytes;const pct=c.used_bytes==null?'n/a':(100*c.used_bytes/cap).toFixed(1)+'%';
const cls=c.eta_seconds!=null?'crit':(c.leak||c.spike_risk?'warn':'ok');
return `<div class="card" data-gpu="${c.gpu}"><b>GPU ${c.gpu}</b> ${esc(c.name)}<br><span class="num">${pct}</span><span class="num">${g(c.used_bytes)} / ${g(cap)}</span>
<span class="num ${cls}">${esc(c.shape)}${c.leak?' leak '+(c.leak_bytes_per_second/1048576).toFixed(0)+' MiB/s':''}</span>
<span class="num ${cls}">${c.eta_text?'OOM in '+c.eta_text:'no leak'}</span>${c.spike_risk?'<span class="num warn">spike risk</span>':''}${plot(c)}
<table>${c.processes.map(p=>`<tr><td>${p.pid}</td><td>${esc(p.name)}</td><td class="${p.role=='stray'?'crit':''}">${p.role}</td><td>${g(p.used_bytes)}</td></tr>`).join('')}</table></div>`}).join('')}
catch(e){document.getElementById('sources').innerHTML='<div class="down">oomwatch not answering</div>'}}
tick();setInterval(tick,2000);
</script></body></html>"""


def routes(sampler) -> dict:
    return {
        "/": lambda: ("text/html; charset=utf-8", PAGE.encode()),
        "/api/v1/status": lambda: ("application/json", json.dumps(status(sampler)).encode()),
    }
