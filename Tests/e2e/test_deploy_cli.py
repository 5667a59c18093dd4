"""The deploy tools' command lines: --help on each exits 0 and prints its
usage; an unknown option exits 64 (EX_USAGE) with a usage line, never
argparse's 2 or a traceback, so a script can tell a wrong command from a run
that failed. No stack is started: QUAD_HOME points at an empty folder."""

import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# deploy/test too: a wrong option is refused before anything is installed,
# built or run (it once ran the whole suite after swift test refused it).
TOOLS = ["stack", "chaos", "fuzz", "image", "kube", "quickstart", "campus", "bench", "flood", "checker.py", "test"]


def run(tool, arg, tmp_path):
    path = os.path.join(ROOT, "deploy", tool)
    cmd = ["python3", path, arg] if tool.endswith(".py") else [path, arg]
    env = dict(os.environ, QUAD_HOME=str(tmp_path / "home"))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, cwd=str(tmp_path))


@pytest.mark.parametrize("tool", TOOLS)
def test_help_exits_0_with_its_usage(tool, tmp_path):
    p = run(tool, "--help", tmp_path)
    assert p.returncode == 0, (tool, p.returncode, p.stderr[-500:])
    assert "usage" in (p.stdout + p.stderr).lower(), (tool, p.stdout[:300])


@pytest.mark.parametrize("tool", TOOLS)
def test_an_unknown_option_is_a_usage_error_64(tool, tmp_path):
    p = run(tool, "--no-such-option", tmp_path)
    assert p.returncode == 64, (tool, p.returncode, p.stderr[-500:])
    assert "Traceback" not in p.stderr, (tool, p.stderr[-800:])
    assert "usage" in p.stderr.lower() or "--help" in p.stderr, (tool, p.stderr[-500:])


def commands(tool, tmp_path):
    """The commands a tool's usage lists under "Commands:" (two spaces in)."""
    usage = run(tool, "--help", tmp_path).stdout
    block = usage.split("Commands:", 1)[1]
    names = []
    for line in block.splitlines()[1:]:
        if line and not line.startswith(" "):
            break
        if line.startswith("  ") and line[2:3].isalpha():
            name = line.split()[0]
            if name not in names:
                names.append(name)
    return names


@pytest.mark.parametrize("tool", ["stack", "chaos", "kube"])
def test_each_commands_help_exits_0_says_that_command_and_does_nothing(tool, tmp_path):
    names = commands(tool, tmp_path)
    assert len(names) >= 5, (tool, names)
    for name in names:
        work = tmp_path / name
        work.mkdir()
        p = subprocess.run([os.path.join(ROOT, "deploy", tool), name, "--help"], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, QUAD_HOME=str(tmp_path / "home")), cwd=str(work))
        assert p.returncode == 0, (tool, name, p.returncode, p.stderr[-500:])
        assert name in p.stdout and "Traceback" not in p.stderr, (tool, name, p.stdout[:300], p.stderr[-300:])
        # Asking is all it does: no file written where it ran (kube's
        # 'manifests --help' once wrote 13 manifests into a folder '--help').
        assert os.listdir(work) == [], (tool, name, os.listdir(work))
    assert not os.path.exists(tmp_path / "home" / "run"), "a command's --help started something"


def test_scale_takes_1_to_16_workers(tmp_path):
    for n in ("0", "17", "99"):
        p = subprocess.run([os.path.join(ROOT, "deploy", "stack"), "scale", "catalog", n], capture_output=True, text=True,
                           timeout=60, env=dict(os.environ, QUAD_HOME=str(tmp_path / "home")))
        assert p.returncode == 64 and "from 1 to 16" in p.stderr, (n, p.returncode, p.stderr)


@pytest.mark.parametrize("env,code,said", [
    ({"QUAD_START_SECS": "2s"}, 64, "QUAD_START_SECS must be a whole number, got '2s'"),
    ({"QUAD_STOP_TIMEOUT": "-1"}, 64, "QUAD_STOP_TIMEOUT must be a whole number, got '-1'"),
    ({"QUAD_HOME": "quad home"}, 1, "QUAD_HOME must not hold spaces"),
])
def test_up_refuses_what_supervisord_cannot_take_before_starting_anything(env, code, said, tmp_path):
    home = str(tmp_path / env.get("QUAD_HOME", "home"))
    full = {k: v for k, v in os.environ.items() if not k.startswith("QUAD_") or k in ("QUAD_BIN_DIR", "QUAD_BUILD_DIR")}
    full.update(env, QUAD_HOME=home, QUAD_PORT_BASE="1200")
    p = subprocess.run([os.path.join(ROOT, "deploy", "stack"), "up", "--no-build"], capture_output=True, text=True, timeout=120, env=full)
    assert p.returncode == code and said in p.stderr, (env, p.returncode, p.stderr[-600:])
    assert not os.path.exists(os.path.join(home, "run", "supervisor")), "supervisord's folder was made"
    assert "Starting the Quad stack" not in p.stdout


# The executables, as a user runs them: --help exits 0 with the usage on
# stdout; a refused option exits 64 naming it, from the executable's main
# (the libraries throw), and a worker refused so leaves no store behind.
BIN = os.environ.get("QUAD_BIN_DIR", os.path.join(ROOT, ".build", "release"))
EXECUTABLES = ["quad-broker", "quad-accounts", "quad-catalog", "quad-favorites", "quad-orders", "quad-reservations",
               "quad-telemetry", "quad-analytics", "quad-notifications", "quad-edge", "quadctl"]
REFUSED = [
    ("quad-catalog", ["--heartbeat-ms", "1"], "--heartbeat-ms must be at least 10"),
    ("quad-catalog", ["--metrics", "bogus"], "--metrics must be HOST:PORT"),
    ("quad-accounts", ["--token-ttl-seconds", "0"], "--token-ttl-seconds must be an integer from 1"),
    ("quad-accounts", ["--admin", "no-colon"], "--admin must be EMAIL:PASSWORD"),
    ("quad-reservations", ["--sim-speed", "x"], "--sim-speed must be a number"),
    ("quad-edge", ["--phones", "x"], "option --phones must be an integer, got 'x'"),
    ("quad-broker", ["--max-queue", "0"], "--max-queue must be at least 1"),
    ("quad-telemetry", ["bench", "--batch", "0"], "--batch 1 to"),
]


def run_exe(name, args, tmp_path):
    env = dict(os.environ, QUAD_HOME=str(tmp_path / "home"))
    env.pop("QUAD_CATALOG_DB", None)
    return subprocess.run([os.path.join(BIN, name)] + args, capture_output=True, text=True, timeout=60, env=env, cwd=str(tmp_path))


@pytest.mark.parametrize("name", EXECUTABLES)
def test_an_executables_help_exits_0_and_an_unknown_option_64(name, tmp_path):
    p = run_exe(name, ["--help"], tmp_path)
    assert p.returncode == 0 and "--help" in p.stdout, (name, p.returncode, p.stdout[:300], p.stderr[-300:])
    p = run_exe(name, ["--no-such-option"], tmp_path)
    assert p.returncode == 64 and "unknown option --no-such-option" in p.stderr, (name, p.returncode, p.stderr[-300:])


@pytest.mark.parametrize("name,args,said", REFUSED)
def test_a_refused_option_exits_64_and_leaves_nothing_behind(name, args, said, tmp_path):
    p = run_exe(name, args, tmp_path)
    assert p.returncode == 64 and said in p.stderr, (name, args, p.returncode, p.stderr[-400:])
    stores = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs if ".db" in f]
    assert stores == [], (name, args, stores)
