"""deploy/chaos run --prometheus, as a user runs it: a short chaos run whose
stack runs Prometheus (rules evaluated every second), with a fixed list of
faults (a broker killed, workers killed and paused, a service cut off from
the brokers, PostgreSQL restarted). The run must pass every check, the alerts
check among them (deploy/quaddeploy/alerts.py: each fault a metric sees raised
its alert in the stated time, every alert resolved, none fired with no fault
in force), alerts.json must list the alerts of a broker's death, a worker's
restart and a paused worker, and report.html must draw them.

As root (network namespaces, nftables), about 2 minutes. A port base and a
hosts net of its own: the first free from QUAD_TEST_PORT_BASE (default 23700)
and QUAD_TEST_HOSTS_NET_FROM (default 0).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "deploy"))
import quadclient  # noqa: E402

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces and nftables"),
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian's prometheus package is not installed"),
]


@pytest.fixture
def run_folder():
    folder = tempfile.mkdtemp(prefix="quad-chaos-alerts.")
    os.chmod(folder, 0o755)  # PostgreSQL (user postgres) keeps its data in it
    yield os.path.join(folder, "run")
    home = os.path.join(folder, "run", "home")
    if os.path.exists(os.path.join(home, "run")):
        subprocess.run([os.path.join(ROOT, "deploy", "stack"), "down"], env=dict(os.environ, QUAD_HOME=home),
                       capture_output=True, text=True, timeout=300)
    shutil.rmtree(folder, ignore_errors=True)


def test_chaos_run_with_prometheus_checks_the_alerts(run_folder):
    env = dict(os.environ)
    for k in ("QUAD_HOME", "QUAD_FRONTEND", "QUAD_BACKEND", "QUAD_EVENTS_IN", "QUAD_EVENTS_OUT", "QUAD_INTERNAL",
              "QUAD_METRICS_BASE", "QUAD_EDGE_CONTROL", "QUAD_PROMETHEUS_PORT", "QUAD_PROMETHEUS_INTERVAL"):
        env.pop(k, None)
    env["QUAD_PORT_BASE"] = str(quadclient.free_port_base(int(os.environ.get("QUAD_TEST_PORT_BASE", "23700"))))
    env["QUAD_HOSTS_NET"] = str(quadclient.free_hosts_net(int(os.environ.get("QUAD_TEST_HOSTS_NET_FROM", "0"))))
    env["QUAD_RESTART_DELAY"] = "1"
    cmd = [os.path.join(ROOT, "deploy", "chaos"), "run", "--prometheus", "--phones", "6", "--duration", "40", "--seed", "3",
           "--faults", "broker,kill,pause,partition,pg", "--kill-every", "12", "--pause-every", "12", "--partition-every", "14",
           "--broker-every", "15", "--pg-every", "50", "--scale-service", "none", "--drain-timeout", "60", "--out", run_folder]
    began = time.monotonic()
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    took = time.monotonic() - began
    out = p.stdout + p.stderr
    print(out[-3000:])
    print("deploy/chaos run --prometheus took %.0f s" % took)
    assert p.returncode == 0, "deploy/chaos run --prometheus exited %d:\n%s" % (p.returncode, out[-5000:])
    assert "alerts checked (Prometheus every 1s)" in out, out[:500]

    check = json.load(open(os.path.join(run_folder, "check.json")))
    alerts_check = next((c for c in check["checks"] if c["name"] == "alerts"), None)
    assert alerts_check and alerts_check["ok"], alerts_check
    seen = check["alerts"]["seen"]
    kinds = {s["fault"].split(" ")[0] for s in seen}
    assert {"kill", "pause"} <= kinds and any(s["fault"].startswith("kill broker") for s in seen), seen

    doc = json.load(open(os.path.join(run_folder, "alerts.json")))
    names = {a["alert"] for a in doc["alerts"]}
    assert {"QuadBrokerRestarted", "QuadWorkerRestarted", "QuadWorkerNotAnswering"} <= names, names
    for a in doc["alerts"]:
        assert a["first"] <= a["last"] and a["labels"].get("severity") and "alertname" not in a["labels"], a
    assert all(a["resolved"] for a in doc["alerts"] if a["alert"] in ("QuadBrokerRestarted", "QuadWorkerRestarted")), doc["alerts"]

    page = open(os.path.join(run_folder, "report.html")).read()
    assert "alerts firing (Prometheus" in page and "QuadBrokerRestarted" in page
