"""A real Prometheus beside a real stack, and the rules that say what is wrong
(issue 31, points 1 to 3).

- The rules of deploy/prometheus/rules load (`promtool check rules`) and their
  unit tests pass (`promtool test rules deploy/prometheus/tests/*.yml`); every
  alert has a unit test and a summary naming the first command; every metric
  the rules read is one that a Quad process exports (its name is in
  Sources/).
- `deploy/stack up --prometheus`, as a user runs it (QUAD_HOME a temporary
  folder, a free port base), runs Debian's Prometheus under the stack's
  supervisord: `up` and `status` print its address, its HTTP API reports every
  broker and worker as a target that is up and every rule group loaded; then
  favorites' only worker is killed and kept down (`deploy/stack kill
  favorites`) and QuadServiceNoWorker fires for favorites, and for no other
  service; `deploy/stack down` stops Prometheus with the rest.

Environment: QUAD_PROMETHEUS_PORT_BASE (where the search for a free port base
starts, default 26000), QUAD_STACK_TIMEOUT (seconds for deploy/stack up,
default 300). deploy/stack sees the rest (QUAD_BIN_DIR, QUAD_BUILD_DIR).
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))
import quadclient  # noqa: E402

RULES = sorted(glob.glob(str(ROOT / "deploy/prometheus/rules/*.yml")))
TESTS = sorted(glob.glob(str(ROOT / "deploy/prometheus/tests/*.yml")))
STACK_TIMEOUT = float(os.environ.get("QUAD_STACK_TIMEOUT", "300"))

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None or shutil.which("promtool") is None,
                                reason="Debian's prometheus package is not installed (deploy/lib.sh quad_install_deps installs it)")


def run(cmd, timeout=120, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


# ---------------------------------------------------------------- the rules


def rules_of(kind):
    out = []
    for f in RULES:
        for group in yaml.safe_load(open(f))["groups"]:
            out += [r for r in group["rules"] if kind in r]
    return out


def test_promtool_check_and_test_rules():
    assert RULES and TESTS
    r = run(["promtool", "check", "rules", *RULES])
    assert r.returncode == 0, r.stdout + r.stderr
    r = run(["promtool", "test", "rules", *TESTS], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == len(TESTS), r.stdout


def test_every_alert_has_a_unit_test_and_a_summary_with_a_command():
    alerts = rules_of("alert")
    assert len(alerts) >= 15
    tested = {}  # alert -> (fires in some test, expected silent in some test)
    for f in TESTS:
        for t in yaml.safe_load(open(f))["tests"]:
            for case in t.get("alert_rule_test", []):
                fired, silent = tested.get(case["alertname"], (False, False))
                tested[case["alertname"]] = (fired or bool(case.get("exp_alerts")), silent or not case.get("exp_alerts"))
    for a in alerts:
        name = a["alert"]
        assert tested.get(name) == (True, True), f"{name}: no unit test that fires it and one where it stays silent"
        summary = a.get("annotations", {}).get("summary", "")
        assert re.search(r"`(deploy/stack|quadctl) [^`]+`", summary), f"{name}: its summary names no first command: {summary!r}"


def exported_metrics():
    """Every metric name a Quad process declares or sets (Sources/)."""
    names = set()
    for f in (ROOT / "Sources").rglob("*.swift"):
        names |= set(re.findall(r'"(quad_[a-z_]+)"', f.read_text(errors="replace")))
    # quad-edge's outcome counters are named from a variable.
    names |= {"quad_edge_actions_acknowledged_total", "quad_edge_actions_failed_total"}
    return names


def test_rules_read_only_metrics_the_processes_export():
    exported = exported_metrics()
    assert "quad_requests_total" in exported and "quad_broker_workers" in exported
    used = set()
    for r in rules_of("expr"):
        used |= set(re.findall(r"\b(quad_[a-z_]+)", r["expr"]))
    assert used
    for name in sorted(used):
        base = re.sub(r"_(bucket|count|sum)$", "", name)
        assert name in exported or base in exported, f"the rules read {name}, which no Quad process exports"


def test_kubernetes_prometheus_is_optional_and_carries_the_rules():
    """deploy/k8s/optional/prometheus.yaml: not a resource of the
    kustomization, and its ConfigMap holds the rules as they are."""
    k8s = ROOT / "deploy/k8s"
    assert "prometheus" not in (k8s / "kustomization.yaml").read_text()
    docs = list(yaml.safe_load_all((k8s / "optional/prometheus.yaml").read_text()))
    kinds = [d["kind"] for d in docs]
    assert {"ConfigMap", "Deployment", "Service", "Role", "RoleBinding", "ServiceAccount"} <= set(kinds), kinds
    data = next(d for d in docs if d["kind"] == "ConfigMap")["data"]
    for f in RULES:
        assert data.get(Path(f).name) == Path(f).read_text(), f"{Path(f).name} differs: run deploy/kube manifests"
    config = yaml.safe_load(data["prometheus.yml"])
    assert config["rule_files"] == ["/etc/prometheus/quad-*.yml"]


# ---------------------------------------------------------- a real stack


def free_base():
    start = os.environ.get("QUAD_PROMETHEUS_PORT_BASE", "26000")
    r = run([sys.executable, "-m", "quaddeploy.ports", "--free-from", start, "--brokers", "2"], cwd=ROOT / "deploy")
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip())


def api(base_url, path):
    with urllib.request.urlopen(base_url + "api/v1/" + path, timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]


def wait_for(what, check, timeout):
    """Polls check() (a value, or None to go on) until it gives one; fails
    after `timeout` seconds, naming what it waited for and what it saw last."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            got = check()
        except (OSError, ValueError) as e:
            got, last = None, e
        if got is not None:
            return got
        time.sleep(0.5)
    pytest.fail(f"{what} did not happen within {timeout} s (last: {last!r}, {getattr(check, 'last', None)!r})")


class Stack:
    def __init__(self):
        self.home = tempfile.mkdtemp(prefix="quad-prom-")
        self.base = free_base()
        self.env = dict(os.environ, QUAD_HOME=self.home, QUAD_PORT_BASE=str(self.base))
        for k in quadclient.STACK_ENDPOINT_VARIABLES:
            self.env.pop(k, None)
        for k in ("QUAD_PROMETHEUS_PORT", "QUAD_METRICS_BASE"):
            self.env.pop(k, None)
        self.up_output = ""

    def stack(self, *args, timeout=120):
        return run([str(ROOT / "deploy/stack"), *args], timeout=timeout, cwd=ROOT, env=self.env)

    def pid(self):
        try:
            return int(Path(self.home, "run/prometheus.pid").read_text())
        except (OSError, ValueError):
            return None


@pytest.fixture(scope="module")
def stack():
    s = Stack()
    try:
        up = s.stack("up", "--prometheus", timeout=STACK_TIMEOUT)
        s.up_output = up.stdout + up.stderr
        assert up.returncode == 0, f"deploy/stack up --prometheus failed (logs in {s.home}):\n{s.up_output[-4000:]}"
        yield s
    finally:
        s.stack("down", timeout=180)
    shutil.rmtree(s.home, ignore_errors=True)


def test_stack_runs_prometheus_and_its_alert_fires(stack):
    t0 = time.monotonic()
    port = stack.base + 89
    url = f"http://127.0.0.1:{port}/"
    assert f"prometheus {url}" in stack.up_output, stack.up_output
    status = stack.stack("status")
    assert status.returncode == 0 and f"Prometheus (up --prometheus): {url}" in status.stdout, status.stdout + status.stderr
    pid = stack.pid()
    assert pid and Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"prometheus")
    assert Path(stack.home, "prometheus/data").is_dir()

    # Every broker and worker of the stack is a target, and every one is up.
    listed = stack.stack("metrics", "--json")
    assert listed.returncode == 0, listed.stderr
    want = {t["instance"] for t in json.loads(listed.stdout)["targets"]}
    assert {"broker", "broker-2", "accounts/1", "accounts/2", "catalog/1", "favorites/1"} <= want, want

    def all_up():
        targets = api(url, "targets")["activeTargets"]
        all_up.last = sorted((t["labels"]["instance"], t["health"]) for t in targets)
        health = {t["labels"]["instance"]: t["health"] for t in targets}
        return health if set(health) == want and set(health.values()) == {"up"} else None
    wait_for("every target up in Prometheus", all_up, 60)

    # Every rule group of deploy/prometheus/rules is loaded and evaluates.
    def rules_ok():
        groups = api(url, "rules")["groups"]
        rules_ok.last = [(g["name"], [r["health"] for r in g["rules"]]) for g in groups]
        names = {r["name"] for g in groups for r in g["rules"] if r["type"] == "alerting"}
        if "QuadServiceNoWorker" not in names or any(r["health"] == "err" for g in groups for r in g["rules"]):
            return None
        return names
    names = wait_for("the rules loaded", rules_ok, 30)
    assert {"QuadBrokerDown", "QuadServiceNoWorker", "QuadErrorBudgetBurnFast"} <= names

    def firing():
        alerts = api(url, "alerts")["alerts"]
        firing.last = sorted((a["labels"]["alertname"], a["labels"].get("service", a["labels"].get("instance", "")), a["state"]) for a in alerts)
        return [a for a in alerts if a["state"] == "firing"]
    assert not any(a["labels"]["alertname"] == "QuadServiceNoWorker" for a in firing()), firing.last

    # favorites' only worker killed and kept down: the brokers see none.
    killed = stack.stack("kill", "favorites")
    assert killed.returncode == 0, killed.stdout + killed.stderr
    t_kill = time.monotonic()

    def no_worker_fires():
        got = [a for a in firing() if a["labels"]["alertname"] == "QuadServiceNoWorker"]
        return got or None
    got = wait_for("QuadServiceNoWorker firing for favorites", no_worker_fires, 90)
    took = time.monotonic() - t_kill
    assert [a["labels"]["service"] for a in got] == ["favorites"], got
    assert "favorites has no live worker" in got[0]["annotations"]["summary"]
    assert "`deploy/stack status`" in got[0]["annotations"]["summary"]
    print(f"QuadServiceNoWorker fired {took:.1f} s after the kill; test {time.monotonic() - t0:.1f} s")

    # down stops Prometheus with the rest.
    down = stack.stack("down", timeout=180)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not Path(f"/proc/{pid}").exists(), "Prometheus is still running after deploy/stack down"
    assert quadclient_port_free(port), f"something still listens on {port} after down"


def quadclient_port_free(port):
    import socket
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) != 0
