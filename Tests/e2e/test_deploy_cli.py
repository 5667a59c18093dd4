"""The deploy tools' command lines: --help on each exits 0 and prints its
usage; an unknown option exits 64 (EX_USAGE) with a usage line, never
argparse's 2 or a traceback, so a script can tell a wrong command from a run
that failed. No stack is started: QUAD_HOME points at an empty folder."""

import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = ["stack", "chaos", "fuzz", "image", "kube", "quickstart", "campus", "bench", "flood", "checker.py"]


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


def test_scale_takes_1_to_16_workers(tmp_path):
    for n in ("0", "17", "99"):
        p = subprocess.run([os.path.join(ROOT, "deploy", "stack"), "scale", "catalog", n], capture_output=True, text=True,
                           timeout=60, env=dict(os.environ, QUAD_HOME=str(tmp_path / "home")))
        assert p.returncode == 64 and "from 1 to 16" in p.stderr, (n, p.returncode, p.stderr)
