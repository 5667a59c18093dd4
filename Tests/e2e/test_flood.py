"""One anonymous client floods a stack started with deploy/stack up, as a user
would start it, while a signed-in student keeps using it (deploy/flood): the
broker's memory stays under 100 MB above idle, every worker stays registered
and the student keeps getting answers. The latency figures are printed, not
judged: speed belongs to the benchmark (deploy/flood --seconds 60 prints the
p99 against its 1 s goal).

Environment: QUAD_FLOOD_PORT_BASE (where the search for a free port base starts, default 18900), QUAD_FLOOD_SECONDS
(default 30), QUAD_STACK_TIMEOUT (seconds for deploy/stack up, default 300).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))
import quadclient  # noqa: E402

# The first free port base from QUAD_FLOOD_PORT_BASE (where the search for a free port base starts, default 18900): every port
# of the stack free, so a stack of the machine on its own ports is left alone.
PORT_BASE = quadclient.free_port_base(int(os.environ.get("QUAD_FLOOD_PORT_BASE", "18900")))
SECONDS = float(os.environ.get("QUAD_FLOOD_SECONDS", "30"))
STACK_TIMEOUT = float(os.environ.get("QUAD_STACK_TIMEOUT", "300"))


def test_a_flood_from_one_anonymous_client_leaves_the_broker_bounded_and_serving():
    with quadclient.LaunchedStack("quad-flood-", PORT_BASE, timeout=STACK_TIMEOUT) as stack:
        report = Path(stack.home, "flood.json")
        flood = subprocess.run(
            [str(ROOT / "deploy" / "flood"), "--seconds", str(SECONDS), "--frontend", stack.frontend,
             "--home", stack.home, "--min-answered", "0.95", "--report", str(report)],
            cwd=ROOT, env=stack.env, capture_output=True, text=True, timeout=SECONDS + 180)
        print(flood.stdout[-4000:])
        print(flood.stderr[-2000:])
        figures = json.loads(report.read_text())
        assert figures["flood_sent"] > 0 and figures["flood_connections"] > 10, figures
        assert flood.returncode == 0, f"deploy/flood failed: {figures['failures']}"
        status = stack.run("status")
        assert status.returncode == 0, status.stdout + status.stderr
