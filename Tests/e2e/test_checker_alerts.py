"""The checker's alerts check (deploy/quaddeploy/alerts.py, deploy/checker.py
--alerts), with no stack: a synthetic faults.log and alerts.json where every
fault raised its alert passes; one where an alert is missing, one where an
alert fires with no fault in force and one where an alert never resolves
fail, each naming the violation."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "deploy"))
import checker  # noqa: E402
from quaddeploy import alerts  # noqa: E402

T0_MS = 1_800_000_000_000
T0 = T0_MS / 1000.0

FAULTS = """[   0s] partition phones | broker
[   3s] heal phones | broker
[  10s] kill catalog (restarted in 1 s)
[  15s] pause orders for 4 s
[  20s] partition broker | favorites
[  27s] heal broker | favorites
[  30s] broker: kill broker 2 (supervisord restarts it)
[  40s] pg: restart postgres (starting)
[  43s] pg: restart postgres done
[  50s] partition broker | accounts
[  53s] heal broker | accounts
"""


def firing(name, first, last, to=200, **labels):
    return {"alert": name, "labels": dict(labels, severity="info"), "first": T0 + first, "last": T0 + last,
            "resolved": T0 + last < T0 + to - 2}


def good_alerts():
    return [
        firing("QuadWorkerRestarted", 12, 42, job="quad-catalog", instance="catalog/1"),
        firing("QuadWorkerNotAnswering", 16, 28, job="quad-orders", instance="orders/1"),
        firing("QuadWorkersLost", 24, 55, job="quad-broker", instance="broker", service="favorites"),
        firing("QuadBrokerRestarted", 31, 61, job="quad-broker", instance="broker-2"),
        firing("QuadStoreReconnected", 44, 74, job="quad-telemetry", service="telemetry"),
    ]


def write(tmp_path, alerts_list, to=200):
    faults = tmp_path / "faults.log"
    faults.write_text(FAULTS)
    doc = {"prometheus": "http://127.0.0.1:1/", "step_s": 1, "t0_ms": T0_MS, "from": T0 - 30, "to": T0 + to, "alerts": alerts_list}
    path = tmp_path / "alerts.json"
    path.write_text(json.dumps(doc))
    return str(faults), doc


def run_check(tmp_path, alerts_list, to=200):
    faults, doc = write(tmp_path, alerts_list, to)
    return alerts.check(doc, checker.fault_windows(faults, restart_s=1.0))


def test_every_fault_seen_passes(tmp_path):
    r = run_check(tmp_path, good_alerts())
    assert r["ok"], r
    assert len(r["seen"]) == 5 and not r["missed"] and not r["unexplained"] and not r["unresolved"], r
    # The 3-s partition of accounts is shorter than a heartbeat liveness and
    # two seconds, the phones' partition is not seen by any metric.
    assert any("broker | accounts" in w and "shorter" in w for w in r["not_expected"]), r["not_expected"]
    assert any("phones | broker" in w for w in r["not_expected"]), r["not_expected"]


def test_a_missing_alert_fails(tmp_path):
    # The broker's death raised nothing.
    r = run_check(tmp_path, [a for a in good_alerts() if a["alert"] != "QuadBrokerRestarted"])
    assert not r["ok"]
    assert len(r["missed"]) == 1 and "kill broker 2 at 30 s" in r["missed"][0] and "QuadBrokerRestarted" in r["missed"][0], r
    assert any(e.startswith("missed: kill broker 2") for e in r["examples"])


def test_an_alert_about_another_service_does_not_count(tmp_path):
    wrong = good_alerts()
    wrong[1] = firing("QuadWorkerNotAnswering", 16, 28, job="quad-accounts", instance="accounts/1")
    r = run_check(tmp_path, wrong)
    assert not r["ok"] and len(r["missed"]) == 1 and "pause orders" in r["missed"][0], r


def test_an_alert_with_no_fault_fails(tmp_path):
    r = run_check(tmp_path, good_alerts() + [firing("QuadWorkerRestarted", 120, 150, job="quad-catalog", instance="catalog/1")])
    assert not r["ok"] and not r["missed"]
    assert len(r["unexplained"]) == 1 and "fired at 120 s with no fault in force" in r["unexplained"][0], r


def test_an_alert_that_never_resolves_fails(tmp_path):
    stuck = good_alerts()
    stuck[3] = firing("QuadBrokerRestarted", 31, 199, to=200, job="quad-broker", instance="broker-2")
    stuck[3]["resolved"] = False
    r = run_check(tmp_path, stuck)
    assert not r["ok"] and len(r["unresolved"]) == 1 and "still fired at the record's end" in r["unresolved"][0], r


def test_the_checker_reports_the_violation(tmp_path):
    """deploy/checker.py --alerts: the check's line says FAIL with an example
    (the rest of the checker needs stores: only check_alerts is called)."""
    faults, _ = write(tmp_path, [a for a in good_alerts() if a["alert"] != "QuadWorkersLost"])
    c = checker.Checker(None)
    doc, r = checker.check_alerts(c, str(tmp_path / "alerts.json"), checker.fault_windows(faults, restart_s=1.0))
    ok, text = c.verdict()
    assert not ok
    line = next(l for l in text.splitlines() if l.startswith("alerts"))
    assert "FAIL" in line and "4 of 5 faults seen" in line, text
    assert "partition broker | favorites at 20 s" in text, text


def test_the_table_prints():
    out = subprocess.run([sys.executable, "-m", "quaddeploy.alerts", "table"], cwd=os.path.join(ROOT, "deploy"),
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "QuadBrokerRestarted" in out.stdout and "not expected" in out.stdout, out
