"""A service whose disk fills up answers 503 and loses nothing it
acknowledged (issue 30, point 5), on a stack started with deploy/stack up.

The telemetry and orders services' stores are put on a small tmpfs of their
own (QUAD_TELEMETRY_DB and QUAD_ORDERS_DB on `mount -t tmpfs -o size=...`, as
root): a disk that can fill up without touching the machine's. Phones send batches; then a file takes
the disk's last byte. Batches go on until the store cannot grow: that batch is
answered 503 `unavailable`, its message naming the full store; the worker
that answered is the same process (it did not crash or restart), and every
batch acknowledged before is in the store. The file goes: the refused batch,
sent again under its id as a phone does, is taken once, new batches are
taken, and the store holds every acknowledged event exactly once. Then the
same for a student's cart (orders.cart.add: an idempotency record, a cart
line and an event in the outbox per add): refused with 503 while the disk is
full, the worker alive, and after it the cart is every acknowledged add once.

Environment: QUAD_DISKFULL_PORT_BASE (where the search for a free port base
starts, default 31200), QUAD_STACK_TIMEOUT, QUAD_BIN_DIR as for the other tests.
"""

import errno
import os
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))
import quadclient  # noqa: E402
from quadclient import body_of, error_code  # noqa: E402

PORT_BASE = quadclient.free_port_base(int(os.environ.get("QUAD_DISKFULL_PORT_BASE", "31200")))
STACK_TIMEOUT = float(os.environ.get("QUAD_STACK_TIMEOUT", "300"))
DISK_MB = 24


@pytest.fixture(scope="module")
def disk():
    assert os.geteuid() == 0, "needs root: mounts a tmpfs"
    folder = tempfile.mkdtemp(prefix="quad-disk-full.")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm,mode=0755" % DISK_MB, "tmpfs", folder], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", folder], check=False)
        os.rmdir(folder)


@pytest.fixture(scope="module")
def stack(disk):
    s = quadclient.LaunchedStack("quad-disk-full-", PORT_BASE, env={"QUAD_TELEMETRY_DB": os.path.join(disk, "telemetry.db"),
                                                                         "QUAD_ORDERS_DB": os.path.join(disk, "orders.db")},
                                 timeout=STACK_TIMEOUT)
    s.up()
    try:
        yield s
    finally:
        s.down()


def batch(n, phone="ph-disk"):
    """n telemetry events, each with a UUIDv7-shaped id of its own and some text, as a phone records them."""
    out = []
    for _ in range(n):
        u = uuid.uuid4().hex
        ident = "%s-%s-7%s-8%s-%s" % (u[:8], u[8:12], u[13:16], u[17:20], u[20:32])
        out.append({"id": ident, "phone": phone, "session": "s-disk", "name": "view.opened", "ts": 1_764_583_200_000,
                    "offline": False, "props": {"view": "home"}})
    return out


def fill(folder):
    """Takes every free byte of the file system at `folder` with one file; its path."""
    path = os.path.join(folder, "filler")
    with open(path, "wb", buffering=0) as f:
        for size in (1 << 20, 1 << 12, 1):
            chunk = b"\0" * size
            while True:
                try:
                    f.write(chunk)
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break
    return path


def worker_pid(stack, service="telemetry"):
    return int(Path(stack.home, "run", "%s.1.pid" % service).read_text().split()[0])


def test_a_full_disk_is_503_and_nothing_acknowledged_is_lost(stack, disk):
    c = quadclient.Client(stack.frontends, stack.broker_key(), src="edge/ph-disk")
    acknowledged = []
    for _ in range(3):
        events = batch(200)
        assert body_of(c.call("telemetry.ingest", {"events": events}, timeout=30))["accepted"] == 200
        acknowledged += [e["id"] for e in events]
    pid = worker_pid(stack)
    filler = fill(disk)
    refused = None
    for k in range(400):
        events = batch(200)
        ident = str(uuid.uuid4())
        answer = c.call("telemetry.ingest", {"events": events}, id_=ident, timeout=30)
        if error_code(answer) is not None:
            refused = (ident, events, answer)
            break
        acknowledged += [e["id"] for e in events]
    assert refused is not None, "400 batches of 200 events went into a full %d MB disk" % DISK_MB
    answer = refused[2]
    assert error_code(answer) == "unavailable", answer
    assert answer["body"].get("status", 503) == 503 and "full" in answer["body"].get("message", ""), answer
    # The worker that answered did not crash, and answers again.
    assert os.path.exists("/proc/%d" % pid) and worker_pid(stack) == pid, "the telemetry worker crashed or restarted"
    again = c.call("telemetry.ingest", {"events": refused[1]}, id_=refused[0], timeout=30)
    assert error_code(again) == "unavailable", again

    os.unlink(filler)
    # The refused batch again, under its id (as a phone retries), then a new one.
    taken = body_of(c.call("telemetry.ingest", {"events": refused[1]}, id_=refused[0], timeout=30))
    assert taken["accepted"] == 200, taken
    acknowledged += [e["id"] for e in refused[1]]
    events = batch(50)
    assert body_of(c.call("telemetry.ingest", {"events": events}, timeout=30))["accepted"] == 50
    acknowledged += [e["id"] for e in events]
    assert worker_pid(stack) == pid

    db = sqlite3.connect("file:%s?mode=ro" % os.path.join(disk, "telemetry.db"), uri=True, timeout=30)
    stored = [r[0] for r in db.execute("SELECT id FROM events")]
    db.close()
    missing = set(acknowledged) - set(stored)
    assert not missing, "%d acknowledged events missing from the store, e.g. %s" % (len(missing), sorted(missing)[:3])
    assert len(stored) == len(set(stored)) == len(acknowledged), "stored %d rows, %d ids, acknowledged %d" % (
        len(stored), len(set(stored)), len(acknowledged))
    print("disk full: %d events acknowledged before and after; refused with: %s" % (len(acknowledged), answer["body"].get("message")))


def test_a_cart_on_a_full_disk_is_503_and_every_acknowledged_add_is_kept_once(stack, disk):
    c = quadclient.Client(stack.frontends, stack.broker_key(), src="edge/ph-cart")
    email, password = "disk-%s@uni.edu" % uuid.uuid4().hex[:8], "a long enough password"
    body_of(c.call("accounts.register", {"email": email, "password": password, "name": "Dee Isk", "semester": 3}, timeout=30))
    token = body_of(c.call("accounts.login", {"email": email, "password": password}, timeout=30))["token"]
    added = {}

    def add(product, ident=None):
        return c.call("orders.cart.add", {"product": product, "quantity": 1}, id_=ident, token=token, timeout=30)

    # 40 products (a cart holds at most 50 lines), a unit at a time.
    def product(n):
        return "p-%04d" % (n % 40 + 1)

    for n in range(5):
        assert error_code(add(product(n))) is None
        added[product(n)] = added.get(product(n), 0) + 1
    pid = worker_pid(stack, "orders")
    filler = fill(disk)
    refused = None
    for n in range(5, 1205):
        ident = str(uuid.uuid4())
        answer = add(product(n), ident)
        if error_code(answer) is not None:
            refused = (product(n), ident, answer)
            break
        added[product(n)] = added.get(product(n), 0) + 1
    assert refused is not None, "1,200 cart adds went into a full %d MB disk" % DISK_MB
    assert error_code(refused[2]) == "unavailable" and "full" in refused[2]["body"].get("message", ""), refused[2]
    assert os.path.exists("/proc/%d" % pid) and worker_pid(stack, "orders") == pid, "the orders worker crashed or restarted"
    os.unlink(filler)
    assert error_code(add(refused[0], refused[1])) is None
    added[refused[0]] = added.get(refused[0], 0) + 1
    # The same id again is answered from its record: one unit, not two.
    assert error_code(add(refused[0], refused[1])) is None
    cart = body_of(c.call("orders.cart.view", {}, token=token, timeout=30))
    lines = {line["product"]: line["quantity"] for line in cart["lines"]}
    assert lines == added, "the cart %s, the acknowledged adds %s" % (lines, added)
    assert worker_pid(stack, "orders") == pid
