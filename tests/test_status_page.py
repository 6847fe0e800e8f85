"""The built-in status page in a real headless browser (Debian's chromium), against the daemon replaying."""

import re
import subprocess
import time

import pytest

from conftest import example, free_port, need_binary
from servers import start_oomwatch

pytestmark = pytest.mark.integration
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium(tmp_path, url, *extra):
    exe = need_binary("chromium")
    r = subprocess.run([exe, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000",
                        *extra, url], capture_output=True, text=True, timeout=90)
    return r.stdout


def test_page_shows_every_card_updates_and_reports_a_down_source(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    p, target = start_oomwatch("--replay", example("tp_imbalance.jsonl"), "--speed", "2", "--engine-url", dead)
    try:
        time.sleep(8)
        dom1 = chromium(tmp_path, f"http://{target}/", "--dump-dom")
        time.sleep(6)
        dom2 = chromium(tmp_path, f"http://{target}/", "--dump-dom")
        shot = tmp_path / "status.png"
        chromium(tmp_path, f"http://{target}/", f"--screenshot={shot}", "--window-size=1200,1000")
    finally:
        p.terminate()
        p.wait(10)
    for dom in (dom1, dom2):
        assert 'data-gpu="0"' in dom and 'data-gpu="1"' in dom  # every card
        assert re.search(r"\d+\.\d% *</span>", dom) and "GiB" in dom  # with its numbers
        assert f"source engine:{dead}/metrics down" in dom  # a down source is shown, the page still works
        assert "<svg" in dom  # the curve
    used1 = re.findall(r'data-gpu="1".*?class="num">([\d.]+)%', dom1, re.S)
    used2 = re.findall(r'data-gpu="1".*?class="num">([\d.]+)%', dom2, re.S)
    assert used1 and used2 and used1 != used2  # it updates as the trace plays (GPU 1 leaks)
    assert shot.exists() and shot.stat().st_size > 10000
    assert "workload.py" not in dom2  # no command lines on the page
