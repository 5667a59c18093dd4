"""Two students trade on the marketplace (issue 16, "done when"), on a real
stack started with deploy/stack and a real quad-edge phone.

Ana is a student with a client of her own (quadclient, as quadctl would be):
she uploads a photo of a used calculator and lists it. The buyer is a phone
of quad-edge, driven through its control socket with `quadctl phone`: it
finds the calculator by search, opens it (its photo comes from catalog's
HTTP server once, then from the phone's own cache), buys it; Ana sees it
sold; a second purchase by the buyer and Ana's own purchase are both 409
with their reasons. Ana reads her news (her listing sold, an order of her
own confirmed) and another student can neither read nor mark it. Then the buyer rents a seeded book for 3 days, sees it
in its rentals, and returns it after orders' clock was moved 5 days on
(libfaketime, through the launcher's clock file, as the chaos run skews a
clock): it pays 2 late days at the book's rent rate, and the book's stock is
back as it was.

Fails on the code before issue 16: there were no catalog.listings.*, no
image cache on the phone, no orders.return and no phone action for it.

Environment: QUAD_MARKET_PORT_BASE (where the search for a free port base starts, default 19400: the stack's ports from
there, the phone's control socket at +88), QUAD_STACK_TIMEOUT (deploy/stack
up, default 300), QUAD_BUILD_DIR / QUAD_BIN_DIR as for the other tests.
"""

import base64
import json
import os
import secrets
import struct
import subprocess
import sys
import time
import urllib.request
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))
import quadclient  # noqa: E402
from quadclient import error_code  # noqa: E402

# The first free port base from QUAD_MARKET_PORT_BASE (default 19400): every port
# of the stack free, so a stack of the machine on its own ports is left alone.
PORT_BASE = quadclient.free_port_base(int(os.environ.get("QUAD_MARKET_PORT_BASE", "19400")))
STACK_TIMEOUT = float(os.environ.get("QUAD_STACK_TIMEOUT", "300"))
CONTROL = f"tcp://127.0.0.1:{PORT_BASE + 88}"  # the table's phones control socket (deploy/quaddeploy/ports.py)
BINDIR = Path(os.environ.get("QUAD_BIN_DIR") or Path(os.environ.get("QUAD_BUILD_DIR") or ROOT / ".build") / "release")
BUYER = "buyer-001"
# A seeded textbook (Sources/QuadCatalog/Seed.swift: p-0014 is the Calculus
# Textbook, in stock).
BOOK = "p-0014"


def png(width=24, height=24):
    """A real PNG (zlib-compressed scanlines, CRCs): a calculator-grey gradient."""
    rows = b"".join(b"\x00" + bytes(v for x in range(width) for v in (90 + x * 4, 90 + y * 4, 100)) for y in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def body_of(answer):
    assert answer is not None, "no answer"
    assert error_code(answer) is None, answer
    return answer["body"]


class Market:
    def __init__(self, stack, edge, edge_log):
        self.stack, self.edge, self.edge_log = stack, edge, edge_log
        self.env = dict(stack.env)
        self.env.update({k: v for k, v in stack.exported().items() if k != "PATH"})
        self.clients = []

    def start_edge(self, faketime=None):
        """quad-edge with the buyer's phone (its files in $QUAD_HOME/phones, kept
        across restarts); with `faketime` ("+5d") its wall clock is moved by
        libfaketime. Waits until the phone has signed in."""
        edge_bin = BINDIR / "quad-edge"
        assert edge_bin.exists(), f"no {edge_bin}"
        env = dict(self.env)
        # Through env(1): a Swift program exec'd by this process under
        # libfaketime would not see its arguments (deploy/supervise.sh).
        cmd = ["/usr/bin/env", str(edge_bin), "serve", "--phones", "1", "--prefix", "buyer",
               "--dir", str(Path(self.stack.home, "phones")), "--control", CONTROL]
        if faketime:
            libs = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1")) + sorted(Path("/usr/lib/faketime").glob("libfaketime.so.1"))
            assert libs, "libfaketime is not installed (Debian's faketime)"
            env.update(LD_PRELOAD=str(libs[0]), FAKETIME=faketime, FAKETIME_DONT_FAKE_MONOTONIC="1", FAKETIME_NO_CACHE="1")
        with open(self.edge_log, "a") as log:
            self.edge = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        # Until the phone has signed in (the first time it registers its own student).
        deadline = time.monotonic() + 120
        while True:
            state = self.phone("state", BUYER, check=False)
            phones = state.get("phones") or [state]
            if any(p.get("user") for p in phones if isinstance(p, dict)):
                return
            assert self.edge.poll() is None, f"quad-edge exited {self.edge.returncode}\n{self.edge_tail()}"
            assert time.monotonic() < deadline, f"the phone never signed in: {state}\n{self.edge_tail()}"
            time.sleep(0.5)

    def stop_edge(self):
        if self.edge is None:
            return
        self.phone("stop", check=False)
        try:
            self.edge.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.edge.kill()
            self.edge.wait()
        self.edge = None

    def client(self):
        c = quadclient.Client(self.stack.frontends, self.stack.broker_key(), src="market-test")
        self.clients.append(c)
        return c

    def phone(self, *args, timeout_ms=10000, check=True):
        """`quadctl phone ARGS --json` on the buyer's quad-edge: the body of its answer."""
        cmd = [str(BINDIR / "quadctl"), "phone", *args, "--control", CONTROL, "--timeout", str(timeout_ms), "--json"]
        done = subprocess.run(cmd, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout_ms / 1000 + 30)
        if check:
            assert done.returncode == 0, f"{' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}\n{self.edge_tail()}"
        return json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}

    def edge_tail(self):
        try:
            return Path(self.edge_log).read_text()[-3000:]
        except OSError:
            return ""

    def act(self, kind, body):
        """The buyer makes an action; waits until the outbox has sent it; its entry of the phone's log."""
        queued = self.phone("act", BUYER, kind, json.dumps(body))
        action = queued["id"]
        self.phone("wait", BUYER, timeout_ms=60000)
        entries = [a for a in self.phone("log", BUYER)["actions"] if a["id"] == action]
        assert entries, f"action {action} is not in the phone's log"
        return entries[0]

    def view(self, name, body=None):
        return self.phone("view", BUYER, name, json.dumps(body or {}))


@pytest.fixture(scope="module")
def market():
    stack = quadclient.LaunchedStack("quad-market-", PORT_BASE, timeout=STACK_TIMEOUT)
    try:
        stack.up()
    except quadclient.StackFailed as e:
        pytest.fail(str(e))
    m = Market(stack, None, Path(stack.home, "edge.log"))
    try:
        m.start_edge()
        yield m
    finally:
        m.stop_edge()
        for c in m.clients:
            c.close()
        stack.down()


@pytest.fixture(scope="module")
def ana(market):
    """Ana, a signed-in student with her own client: (client, token, user id, email)."""
    email = f"ana-{secrets.token_hex(4)}@uni.edu"
    password = "pw-" + secrets.token_urlsafe(12)
    c = market.client()
    body_of(c.call("accounts.register", {"email": email, "password": password, "name": "Ana Ruiz", "semester": 4}, timeout=30))
    session = body_of(c.call("accounts.login", {"email": email, "password": password}, timeout=30))
    c.token = session["token"]
    return c, session["token"], session["user"], email


@pytest.fixture(scope="module")
def listing(market, ana):
    """Ana's used calculator, with its photo: (listing reply, photo bytes, photo id)."""
    c, token, _, _ = ana
    photo = png()
    put = body_of(c.call("catalog.images.put", {"data": base64.b64encode(photo).decode()}, token=token, timeout=30))
    created = body_of(c.call("catalog.listings.create", {
        "name": "Used TI-84 graphing calculator", "category": "Study", "collection": "Study Tools",
        "price": {"value": 60, "currency": "USD"}, "type": "Calculator", "condition": "Used",
        "quantity": 1, "mode": "sale", "images": [put["id"]], "info": {"processor": "TI-84 Plus"},
    }, token=token, timeout=30))
    return created, photo, put["id"]


def test_the_buyer_finds_it_sees_its_photo_once_then_from_cache_and_buys_it(market, ana, listing):
    created, photo, photo_id = listing
    _, _, ana_user, ana_email = ana
    lid = created["id"]
    # Found by search, shown with Ana's display name, never her id or email.
    found = market.view("search", {"q": "ti-84 used"})
    products = found["body"]["products"]
    mine = [p for p in products if p["id"] == lid]
    assert mine, f"search did not find {lid}: {found}"
    assert mine[0]["seller"] == "Ana Ruiz"
    text = json.dumps(found)
    assert ana_user not in text and ana_email not in text

    # The photo: from the network the first time, from the phone's cache after.
    first = market.view("product", {"id": lid})
    url = first["body"]["imageUrl"]
    assert url.endswith("/images/" + photo_id)
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.read() == photo, "catalog serves other bytes than those uploaded"
    sources = [i["source"] for i in first["images"] if i["url"] == url]
    assert sources == ["network"], first["images"]
    again = market.view("product", {"id": lid})
    sources = [i["source"] for i in again["images"] if i["url"] == url]
    assert sources and sources[0] in ("memory", "disk"), again["images"]

    bought = market.act("orders.place", {"source": "buy_now", "product": lid, "quantity": 1, "screen": "search"})
    assert bought["outcome"] == "done", (bought.get("code"), bought.get("reason"))


def test_the_seller_sees_it_sold_and_nobody_can_buy_it_again(market, ana, listing):
    c, token, _, _ = ana
    lid = listing[0]["id"]
    mine = body_of(c.call("catalog.listings.mine", {}, token=token, timeout=30))
    row = next(item for item in mine["listings"] if item["id"] == lid)
    assert row["sold"] == 1 and row["in_stock"] == 0 and row["status"] == "sold_out", row
    assert row["revenue"] == 60 and row["fee"] > 0, row

    # The buyer again: the quantity is gone.
    again = market.act("orders.place", {"source": "buy_now", "product": lid, "quantity": 1, "screen": "search"})
    assert again["outcome"] == "rejected" and again["code"] == "conflict", again
    assert "stock" in again["reason"], again

    # Ana, her own listing: 409 with the reason, whatever its stock.
    own = c.call("orders.place", {"source": "buy_now", "product": lid, "quantity": 1}, token=token, timeout=30)
    assert error_code(own) == "conflict", own
    assert own["body"]["status"] == 409 and "own" in own["body"]["message"], own


def notifications(c, token, after=0):
    """Every notification of the token's user after the cursor, page after page, and the last unread count."""
    items, unread = [], 0
    while True:
        page = body_of(c.call("notifications.since", {"after": after, "limit": 200}, token=token, timeout=30))
        items += page["items"]
        after, unread = page["last"], page["unread"]
        if not page["more"]:
            return items, unread


def wait_for_notification(c, token, kind, ref, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        items, _ = notifications(c, token)
        found = [n for n in items if n["kind"] == kind and n["ref"] == ref]
        if found:
            assert len(found) == 1, f"{kind} for {ref} told {len(found)} times: {found}"
            return found[0]
        assert time.monotonic() < deadline, f"no {kind} notification for {ref} within {timeout} s: {items}"
        time.sleep(0.2)


def test_the_buyer_and_the_seller_read_their_news_and_nobody_else_can(market, ana, listing):
    c, token, _, _ = ana
    # The phone bought Ana's calculator: Ana, its seller, is told (never who bought it).
    sold = wait_for_notification(c, token, "listing_sold", listing[0]["id"])
    assert "sold" in sold["text"] and BUYER not in sold["text"], sold
    # Ana buys a seeded product herself: she is told it is confirmed.
    order = body_of(c.call("orders.place", {"source": "buy_now", "product": "p-0001", "quantity": 1, "screen": "home"}, token=token, timeout=30))
    assert order["status"] == "confirmed", order
    confirmed = wait_for_notification(c, token, "order_confirmed", order["order"])
    assert confirmed["read"] is False and "confirmed" in confirmed["text"], confirmed

    # Bo, another student, sees none of it and cannot mark it.
    email, password = f"bo-{secrets.token_hex(4)}@uni.edu", "pw-" + secrets.token_urlsafe(12)
    body_of(c.call("accounts.register", {"email": email, "password": password, "name": "Bo", "semester": 2}, timeout=30))
    bo = body_of(c.call("accounts.login", {"email": email, "password": password}, timeout=30))["token"]
    theirs, _ = notifications(c, bo)
    assert not any(n["id"] in (sold["id"], confirmed["id"]) or n["ref"] in (order["order"], listing[0]["id"]) for n in theirs), theirs
    refused = c.call("notifications.read", {"ids": [confirmed["id"]]}, token=bo, timeout=30)
    missing = c.call("notifications.read", {"ids": ["no-such-id"]}, token=bo, timeout=30)
    assert error_code(refused) == "not_found" and refused["body"]["message"] == f"you have no notification '{confirmed['id']}'", refused
    assert error_code(missing) == "not_found", missing
    # A body naming Ana is refused, not answered with her news.
    named = c.call("notifications.since", {"user": "anyone"}, token=bo, timeout=30)
    assert error_code(named) == "forbidden", named
    assert not [n for n in notifications(c, token)[0] if n["id"] == confirmed["id"] and n["read"]]

    # Ana marks hers read.
    marked = body_of(c.call("notifications.read", {"ids": [confirmed["id"], sold["id"]]}, token=token, timeout=30))
    assert marked["marked"] == 2, marked
    assert all(n["read"] for n in notifications(c, token)[0] if n["id"] in (confirmed["id"], sold["id"]))


def test_a_rental_returned_late_pays_the_late_days_and_the_stock_comes_back(market):
    client = market.client()
    before = body_of(client.call("catalog.product.get", {"id": BOOK}, timeout=30))
    assert before["stock"] > 0, before
    rented = market.act("orders.place", {"source": "buy_now", "product": BOOK, "quantity": 1, "mode": "rent", "days": 3,
                                         "screen": "search"})
    assert rented["outcome"] == "done", (rented.get("code"), rented.get("reason"))
    rentals = market.view("rentals")
    active = [r for r in rentals["body"]["rentals"] if r["state"] == "active"]
    assert len(active) == 1 and active[0]["due_in_days"] == 3, rentals
    order = active[0]["order"]["order"]
    during = body_of(client.call("catalog.product.get", {"id": BOOK}, timeout=30))
    assert during["stock"] == before["stock"] - 1

    # Five days on, for orders only: the launcher starts a worker under
    # libfaketime while $QUAD_HOME/run/clock/orders-N holds an offset.
    clock = Path(market.stack.home, "run", "clock")
    clock.mkdir(parents=True, exist_ok=True)
    workers = int(market.stack.env.get("QUAD_ORDERS_WORKERS", "1"))
    for n in range(1, workers + 1):
        (clock / f"orders-{n}").write_text("+5d\n")
    restarted = market.stack.run("restart", "orders", timeout=180)
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    # And for the buyer's phone, which counts the days left on its own clock.
    market.stop_edge()
    market.start_edge(faketime="+5d")

    overdue = market.view("rentals")
    row = next((r for r in overdue["body"].get("rentals", []) if r["order"]["order"] == order), None)
    assert row is not None, (order, overdue)
    assert row["state"] == "overdue" and row["due_in_days"] == -2, overdue

    returned = market.act("orders.return", {"order": order})
    assert returned["outcome"] == "done", (returned.get("code"), returned.get("reason"))
    after = market.view("rentals")
    row = next(r for r in after["body"]["rentals"] if r["order"]["order"] == order)
    assert row["state"] == "returned", after
    got = row["order"]
    rate = got["items"][0]["rent_rate"]
    assert rate == before["rent_rate"], got
    assert got["late_days"] == 2 and abs(got["late_charge"] - 2 * rate) < 0.005, got

    # The unit is back, once.
    deadline = time.monotonic() + 60
    while True:
        now = body_of(client.call("catalog.product.get", {"id": BOOK}, timeout=30))
        if now["stock"] == before["stock"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert now["stock"] == before["stock"], (before, now)
    # A second return on the phone is refused there, with the reason (the
    # service answers a second return with the first one's answer and no
    # second effect: RentalTests), and no second unit comes back.
    twice = market.phone("act", BUYER, "orders.return", json.dumps({"order": order}), check=False)
    assert twice.get("code") == "conflict" and "already returned" in twice.get("message", ""), twice
    assert body_of(client.call("catalog.product.get", {"id": BOOK}, timeout=30))["stock"] == before["stock"]
