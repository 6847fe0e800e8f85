"""Property: whatever a user types or sets, `oomwatch` ends within seconds with exit 0, 1 or 2; a 2 is exactly one
line on stderr; never a traceback, never a hang.

Every flag of every subcommand (read from the parser itself, so a new flag is covered the day it is added)
and every OOMWATCH_* variable the package reads (found in its source) get random and hostile values: empty,
huge, negative, NaN, inf, unicode, very long, paths to folders and devices. Each case is a real `oomwatch`
process. NVML is made unavailable in it (the `pynvml` import fails), so a live command can only be refused,
never sample a real card; a `run` is bounded by a `--duration` appended last (argparse keeps the last value,
and still checks the fuzzed one) or by a short OOMWATCH_DURATION.
"""

import math
import os
import re
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conftest import ROOT

pytestmark = pytest.mark.slow

RUN_LIMIT_S = 1.5  # how long a fuzzed `run` may serve before its --duration ends it
PROCESS_TIMEOUT_S = 20  # "within seconds", with room for two busy cores
# The interpreter with NVML made unavailable: an oomwatch that can only refuse live commands.
BOOT = "import sys; sys.modules['pynvml'] = None; from oomwatch.cli import main; sys.exit(main())"


def _parsers():
    from oomwatch.cli import build_parser

    top = build_parser()
    return top._subparsers._group_actions[0].choices


def _variables() -> list[str]:
    """Every OOMWATCH_* name: each `run` flag's variable, and every other one the shipped packages mention."""
    from oomwatch.cli import RUN_DEFAULTS, env_name

    names = {env_name(d) for d in RUN_DEFAULTS}
    names |= {env_name(a.dest) for a in _parsers()["run"]._actions if a.option_strings and a.dest != "help"}
    for pkg in ("daemon", "exporters"):
        for d, _, files in os.walk(os.path.join(ROOT, pkg)):
            for f in files:
                if f.endswith(".py"):
                    with open(os.path.join(d, f), encoding="utf-8") as fh:
                        names |= set(re.findall(r"\bOOMWATCH_[A-Z][A-Z0-9_]*[A-Z0-9]\b", fh.read()))
    return sorted(names - {"OOMWATCH_"})


SUBCOMMANDS = _parsers()
VARIABLES = _variables()
BUNDLED = sorted(f[:-6] for f in os.listdir(os.path.join(ROOT, "daemon", "examples")) if f.endswith(".jsonl"))

HOSTILE = [
    "",
    " ",
    "\t",
    "-",
    "--",
    "-1",
    "0",
    "-0",
    "0.0",
    "1e-320",
    "1e309",
    "-1e309",
    "nan",
    "NaN",
    "-nan",
    "inf",
    "-inf",
    "Infinity",
    "9" * 400,
    "1" + "0" * 30,
    str(2**64),
    "0x10",
    "1_000",
    "١٢٣",
    "½",
    "🔥",
    "é" * 3000,
    "x" * 5000,
    "a b",
    "a,b",
    ",",
    "true",
    "maybe",
    "off",
    ".",
    "..",
    "/",
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/proc/self/status",
    "/nonexistent/x.jsonl",
    "~",
    "example:",
    "example:nope",
    "127.0.0.1:99999",
    ":0",
    "[::1]:1",
    "256.1.1.1:1",
    "http://",
    "ftp://x",
    "http://[::1",
    "http://127.0.0.1:1",
    "http://127.0.0.1:99999",
    "((",
    "*",
    "(a+)+$",
    "%s%n",
    "{0}",
    "\\",
    "'",
    '"',
    "\u202e",
    "\ufeff",
    "\u2028",
    "\x85",
    "\x1b[2J",
    "0.05",
    "2",
    "1",
]
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)
NUMBERS = st.one_of(st.floats().map(repr), st.integers(min_value=-(10**30), max_value=10**30).map(str))
VALUES = st.one_of(st.sampled_from(HOSTILE), TEXT, NUMBERS, st.sampled_from(BUNDLED).map(lambda n: "example:" + n))
# Engine URLs are scraped for real: only refused or invalid ones, so no case waits on a remote host.
ENGINE_URLS = st.one_of(
    st.sampled_from(
        [
            "http://127.0.0.1:1",
            "127.0.0.1:1",
            "http://127.0.0.1:1/metrics",
            "",
            "ftp://x",
            "http://",
            "http://[::1",
            "http://127.0.0.1:99999",
            "🔥",
            "http://127.0.0.1:0/x",
        ]
    ),
    TEXT.map(lambda s: "http://127.0.0.1:1/" + s),
)


# Plausible values per argument (by dest), drawn half the time, so that cases get past parsing and reach the
# commands themselves; an argument not named here gets only random and hostile values.
PLAUSIBLE = {
    "listen": st.integers(20000, 60000).map(lambda p: f"127.0.0.1:{p}"),
    "interval": st.sampled_from(["0.05", "0.1", "1", "0.01"]),
    "alertmanager_url": st.just("http://127.0.0.1:1"),
    "external_url": st.just("http://oomwatch.invalid:9846/"),
    "record": st.sampled_from(["out.jsonl", "/dev/null", "/dev/full", "sub/out.jsonl"]),
    "output": st.sampled_from(["out.jsonl", "/dev/null"]),
    "replay": st.sampled_from(["example:" + n for n in BUNDLED]),
    "trace": st.sampled_from(["example:" + n for n in BUNDLED]),
    "speed": st.sampled_from(["1", "50", "1e6", "1e-6", "0.5"]),
    "server_pid": st.sampled_from(["1", str(os.getpid())]),
    "server_cmdline": st.sampled_from(["python", "(a+)+$", "vllm serve"]),
    "flight_dir": st.sampled_from(["flight", "/dev/null"]),
    "duration": st.sampled_from(["0.5", "1"]),
    "plot": st.sampled_from(["chart.png", "chart.svg", "chart.foo", "nodir/chart.png"]),
    "timeout": st.sampled_from(["0.5", "3", "1e-9"]),
    "web_config_file": st.sampled_from(["/dev/null", "/dev/zero", "/nonexistent/web.yml", ".", "/proc/self/status"]),
    "alertmanager_basic_auth_user": st.sampled_from(["alice", "a:b", ""]),
    "engine_basic_auth_user": st.sampled_from(["alice", "a:b", ""]),
}
# Credential files (token, password, CA): devices, folders, missing and multi-line files; none may hang or trace.
for _kind in ("alertmanager", "engine"):
    for _f in ("bearer_token_file", "basic_auth_password_file", "ca_file"):
        PLAUSIBLE[f"{_kind}_{_f}"] = st.sampled_from(
            ["/dev/null", "/dev/zero", "/nonexistent", ".", "/proc/self/status"]
        )


#: Arguments the command writes to (files, or folders it creates): kept inside the case's own folder.
WRITES = {"record", "output", "plot", "flight_dir", "state_dir", "probe_dir"}


def _contain(path: str) -> str:
    """A written path, kept under the working folder: devices stay as they are (writing to them is the
    point), any other absolute path becomes relative and `..` cannot climb out."""
    if path == "" or path.startswith(("/dev/", "/proc/")):
        return path
    return path.lstrip("/").replace("..", "__") or "."


def _value(dest: str, clean: bool):
    if dest in PLAUSIBLE:
        s = PLAUSIBLE[dest] if clean else st.one_of(PLAUSIBLE[dest], VALUES)
    else:
        s = TEXT if clean else VALUES
    return s.map(_contain) if dest in WRITES else s


def _is_long(v: str) -> bool:
    try:
        f = float(v)
    except ValueError:
        return False
    return math.isfinite(f) and f > RUN_LIMIT_S


@st.composite
def invocations(draw):
    """(argv, env) for one oomwatch process: half of them plausible throughout (they reach the command's
    work), half with random and hostile values anywhere."""
    clean = draw(st.booleans())
    cmd = draw(st.sampled_from(sorted(SUBCOMMANDS) + ["(none)"]))
    argv: list[str] = []
    if draw(st.booleans()):
        argv.append("-v")
    if cmd == "(none)":
        argv += draw(st.lists(st.one_of(VALUES, st.sampled_from(["--version", "--help", "-v"])), max_size=3))
        return argv, {}
    argv.append(cmd)
    p = SUBCOMMANDS[cmd]
    for a in p._actions:
        if not a.option_strings or a.dest == "help" or draw(st.integers(0, 3)) != 0:  # each flag 1 time in 4
            continue
        opt = draw(st.sampled_from(a.option_strings))
        if a.nargs == 0:
            argv.append(opt)
        elif a.dest == "engine_url":
            argv += [opt, draw(ENGINE_URLS)]
        else:
            argv += [opt, draw(_value(a.dest, clean))]
    for a in p._actions:  # positionals
        if a.option_strings:
            continue
        if a.dest == "urls":
            argv += draw(st.lists(ENGINE_URLS, min_size=1, max_size=2))
        else:
            argv.append(draw(_value(a.dest, clean)))
    if not clean and draw(st.integers(0, 9)) == 0:
        argv.append(draw(VALUES))  # a stray extra argument
    env = {}
    for name in draw(st.lists(st.sampled_from(VARIABLES), max_size=3, unique=True)):
        dest = name[len("OOMWATCH_") :].lower()
        env[name] = draw(ENGINE_URLS) if name == "OOMWATCH_ENGINE_URL" else draw(_value(dest, clean))
    if cmd == "run":
        if "--replay" not in argv and draw(st.booleans()):
            argv += ["--replay", "example:" + draw(st.sampled_from(BUNDLED))]  # reach the daemon, not only NVML
        if draw(st.booleans()) or "OOMWATCH_DURATION" not in env or _is_long(env["OOMWATCH_DURATION"]):
            argv += ["--duration", str(RUN_LIMIT_S)]
    if cmd == "record" and "--duration" not in argv:
        argv += ["--duration", "1"]  # NVML is unavailable anyway; belt and braces
    return argv, env


def _run(argv, env, cwd):
    e = {k: v for k, v in os.environ.items() if not k.startswith("OOMWATCH_")}
    e.update(env)
    return subprocess.run(
        [sys.executable, "-c", BOOT, *argv],
        capture_output=True,
        text=True,
        env=e,
        cwd=cwd,
        timeout=PROCESS_TIMEOUT_S,
        errors="backslashreplace",
    )


@settings(
    max_examples=int(os.environ.get("OOMWATCH_FUZZ_EXAMPLES", "50")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(invocations())
def test_any_flags_and_variables_end_quickly_with_0_1_or_2(tmp_path_factory, case):
    argv, env = case
    cwd = tmp_path_factory.mktemp("cwd")  # relative --record/--plot/-o paths land here
    try:
        r = _run(argv, env, str(cwd))
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung: oomwatch {argv!r} with {env!r}")
    event(f"{next((a for a in argv[:2] if a in SUBCOMMANDS), '(no command)')}: exit {r.returncode}")
    where = f"oomwatch {argv!r} with {env!r}:\n{r.stderr[-3000:]}"
    assert r.returncode in (0, 1, 2), where
    assert "Traceback" not in r.stderr, where
    if r.returncode == 2:
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("oomwatch"), where


@pytest.mark.parametrize(
    "argv,env",
    [
        (["run", "--replay", "example:staircase"], {"OOMWATCH_INTERVAL": "-1", "OOMWATCH_DURATION": "1"}),
        (["run", "--replay", "example:staircase", "--duration", "1e300"], {}),
        (["run", "--listen", "127.0.0.1:99999"], {}),
        (["--help"], {"OOMWATCH_INTERVAL": "abc"}),
        (["diagnose", "--replay", "/dev/zero"], {}),
        (["replay", "example:stray", "--plot", ""], {}),
        (["run", "--bogus\nsecond line"], {}),
        (["run", "--replay", "example:stray", "--web-config-file", "/dev/zero"], {"OOMWATCH_DURATION": "1"}),
        (["run", "--replay", "example:stray"], {"OOMWATCH_ENGINE_CA_FILE": "/dev/zero", "OOMWATCH_DURATION": "1"}),
        (["run", "--replay", "example:stray", "--alertmanager-basic-auth-user", "a:b"], {}),
        ([], {}),
    ],
)
def test_known_hostile_cases(argv, env, tmp_path):
    """The cases that once hung or printed a traceback, always run (the property above samples)."""
    r = _run(argv, env, str(tmp_path))
    assert r.returncode in (0, 1, 2) and "Traceback" not in r.stderr, r.stderr
    if r.returncode == 2:
        assert len(r.stderr.splitlines()) == 1, r.stderr
