"""deploy/quaddeploy/stackinfo.py, what deploy/stack, deploy/test and
deploy/supervise.sh ask of a stack in Python (no Python inside bash):
each question on real input (a process started in its own session, an
HTTP server, a log), and its command line. Starts no stack; seconds."""

import http.server
import json
import os
import subprocess
import sys
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(ROOT, "deploy")
sys.path.insert(0, DEPLOY)

from quaddeploy import stackinfo  # noqa: E402


def run(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "quaddeploy.stackinfo", *args], cwd=DEPLOY, input=stdin,
                          capture_output=True, text=True, timeout=60)


def test_workers_are_read_from_the_brokers_reply():
    reply = {"services": [{"name": "catalog", "workers": [{"instance": "catalog/1", "served": 12, "busy": True, "pid": 40},
                                                           {"instance": "catalog/2", "served": 0, "busy": False, "pid": 41}]},
                          {"name": "orders", "workers": []}, {"name": "odd", "workers": [{}]}]}
    assert stackinfo.workers(reply) == [("catalog/1", 12, "busy", 40), ("catalog/2", 0, "idle", 41), ("?", "-", "idle", "-")]
    p = run("workers", stdin=json.dumps(reply))
    assert p.returncode == 0 and p.stdout.splitlines() == ["catalog/1 12 busy 40", "catalog/2 0 idle 41", "? - idle -"]
    p = run("workers", stdin="not json")
    assert p.returncode == 1 and "not a sys.services reply" in p.stderr


def test_a_process_of_the_stack_is_found_and_this_sessions_are_not(tmp_path):
    home = str(tmp_path / "home")
    theirs = subprocess.Popen(["sleep", "60"], env=dict(os.environ, QUAD_HOME=home), start_new_session=True)
    ours = subprocess.Popen(["sleep", "60"], env=dict(os.environ, QUAD_HOME=home))
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            found = stackinfo.processes(home, os.getpid())
            if (theirs.pid, "sleep") in found:
                break
            time.sleep(0.05)
        assert (theirs.pid, "sleep") in found, found
        assert all(pid != ours.pid for pid, _ in found), "a process of this session was listed"
        assert stackinfo.processes(str(tmp_path / "other"), os.getpid()) == []
        p = run("processes", home, str(os.getpid()))
        assert p.returncode == 0 and f"{theirs.pid} sleep" in p.stdout.splitlines()
    finally:
        for child in (theirs, ours):
            child.kill()
            child.wait()


def test_the_dashboard_line_is_what_this_process_logged(tmp_path):
    now = 1_000_000.0
    lines = ['not json', json.dumps({"ts": int((now - 600) * 1000), "http": "http://127.0.0.1:1/old"}),
             json.dumps({"ts": int((now - 5) * 1000), "msg": "listening", "http": "http://127.0.0.1:7780"}), "[1]"]
    assert stackinfo.dashboard(lines, 10, "/k/admin.password", now=now) == \
        "http://127.0.0.1:7780/signin   (sign in as an admin; the admin password is in /k/admin.password)"
    assert stackinfo.dashboard(lines, 1, "/k/p", now=now) is None, "an entry from before the process started"
    log = tmp_path / "analytics.1.log"
    log.write_text("\n".join(lines[:2]) + "\n")
    p = run("dashboard", str(log), "5", "/k/p")
    assert p.returncode == 1 and p.stdout == ""


@pytest.fixture
def server():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/-/ready" else 503)
            self.end_headers()

        def log_message(self, *args):
            pass
    s = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{s.server_address[1]}"
    s.shutdown()


def test_ready_is_a_2xx_answer(server):
    assert stackinfo.ready(server + "/-/ready")
    assert not stackinfo.ready(server + "/-/starting")
    assert run("ready", server + "/-/ready").returncode == 0
    assert run("ready", server + "/-/starting").returncode == 1
    assert run("ready", "http://127.0.0.1:1/").returncode == 1


def test_the_digest_puts_the_tests_own_words_first_and_keeps_the_budget():
    lines = ["starting", "x" * 500, "E  assert 1 == 2", "test_stack: FAIL (up): no broker", "noise"] + [f"end {k}" for k in range(10)]
    out = stackinfo.digest(lines)
    assert out[0] == "test_stack: FAIL (up): no broker" and out[1] == "E  assert 1 == 2" and out[2] == "..."
    assert out[-1] == "end 9" and all(len(l) <= 220 for l in out)
    assert sum(len(l) + 1 for l in out) <= 1400
    assert stackinfo.digest(["FAIL " + "y" * 300] * 20, budget=500)[0].endswith("...")


def test_the_command_line_says_what_it_does_and_refuses_a_wrong_one():
    p = run("--help")
    assert p.returncode == 0 and "workers" in p.stdout and "digest" in p.stdout
    assert run("nosuch").returncode == 64
    assert run("processes", "/h", "notapid").returncode == 64
