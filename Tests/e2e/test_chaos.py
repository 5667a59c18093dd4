"""deploy/checker.py on stores made here: a consistent history passes, and
each kind of violation (an acknowledged action lost, an effect applied twice,
a cart unit added twice or lost, actions applied out of order, stock oversold,
a spot held twice, a check-in after the deadline, a telemetry event left on a
phone, missing from the store, stored twice or stored with no phone behind
it) makes it fail with its count. No services run: the stores are SQLite
files with the tables the services and the phones use (the columns the
checker reads). The history recorder (--install-history) is tried on a file
with the phone's tables. Tests/e2e/test_chaos_faults.py makes the checker
fail on a real broken build."""

import itertools
import json
import os
import sqlite3
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECKER = os.path.join(ROOT, "deploy", "checker.py")
sys.path.insert(0, os.path.join(ROOT, "deploy"))
from quaddeploy import services as services_list  # noqa: E402  (deploy/stack.json, the one description)

SERVICES = services_list.names()

PHONE_SCHEMA = """
CREATE TABLE session (one INTEGER PRIMARY KEY, user_id TEXT);
CREATE TABLE outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, type TEXT NOT NULL);
CREATE TABLE action_log (id TEXT PRIMARY KEY, type TEXT NOT NULL, created_ms BIGINT NOT NULL, finished_ms BIGINT,
                         outcome TEXT NOT NULL, code TEXT, reason TEXT, attempts INTEGER NOT NULL DEFAULT 0);
CREATE TABLE telemetry (id TEXT PRIMARY KEY, batch TEXT);
CREATE TABLE chaos_actions (id TEXT PRIMARY KEY, type TEXT NOT NULL, body TEXT NOT NULL, created_ms BIGINT NOT NULL);
CREATE TABLE chaos_telemetry (id TEXT PRIMARY KEY, name TEXT NOT NULL, ts BIGINT NOT NULL);
"""

SERVICE_SCHEMA = """
CREATE TABLE idempotency (id TEXT PRIMARY KEY, type TEXT NOT NULL, reply TEXT NOT NULL, created_ms BIGINT NOT NULL);
CREATE TABLE outbox (seq BIGINT PRIMARY KEY, id TEXT NOT NULL, type TEXT NOT NULL, ts BIGINT NOT NULL, body TEXT NOT NULL);
"""

EXTRA = {
    "catalog": """
        CREATE TABLE products (id TEXT PRIMARY KEY, stock BIGINT NOT NULL);
        CREATE TABLE holds (order_id TEXT PRIMARY KEY, status TEXT NOT NULL, created_ms BIGINT NOT NULL, expires_ms BIGINT NOT NULL);
        CREATE TABLE hold_items (order_id TEXT NOT NULL, product TEXT NOT NULL, quantity BIGINT NOT NULL, PRIMARY KEY (order_id, product));
    """,
    "orders": """
        CREATE TABLE orders (id TEXT PRIMARY KEY, user_id TEXT NOT NULL, status TEXT NOT NULL, source TEXT NOT NULL,
                             items TEXT NOT NULL, updated_ms BIGINT NOT NULL);
        CREATE TABLE cart_lines (user_id TEXT NOT NULL, product TEXT NOT NULL, quantity BIGINT NOT NULL, PRIMARY KEY (user_id, product));
    """,
    "reservations": """
        CREATE TABLE reservations (id TEXT PRIMARY KEY, user_id TEXT NOT NULL, spot TEXT NOT NULL, status TEXT NOT NULL,
                                   held_ms BIGINT NOT NULL, deadline_ms BIGINT NOT NULL, checked_in_ms BIGINT, ended_ms BIGINT);
    """,
    "telemetry": """
        CREATE TABLE events (id TEXT NOT NULL, phone TEXT NOT NULL);  -- no key: a test stores an id twice
        CREATE TABLE ingest_totals (one INTEGER PRIMARY KEY, conflicting BIGINT NOT NULL);
        INSERT INTO ingest_totals VALUES (1, 0);
    """,
}

# What some worlds add to the tables above, each statement used where a
# world needs it (the checks that read these run only when they are there);
# keys are "table" or "table/column" (a dotted key would read as a type to
# test_protos.py's check of the types named here).
LATER = {
    "catalog": {"listings": "CREATE TABLE listings (id TEXT PRIMARY KEY, quantity BIGINT NOT NULL, unlisted BIGINT NOT NULL)",
                "products/version": "ALTER TABLE products ADD COLUMN version BIGINT NOT NULL DEFAULT 0"},
    "orders": {"orders/mode": "ALTER TABLE orders ADD COLUMN mode TEXT NOT NULL DEFAULT 'buy'",
               "orders/version": "ALTER TABLE orders ADD COLUMN version BIGINT NOT NULL DEFAULT 0"},
    "telemetry": {"events/payload": ";".join("ALTER TABLE events ADD COLUMN " + c
                                             for c in ("session TEXT", "name TEXT", "ts BIGINT", "offline INTEGER", "props TEXT")),
                  "event_conflicts": "CREATE TABLE event_conflicts (id TEXT, digest TEXT, payload TEXT, first_ms BIGINT, last_ms BIGINT, times BIGINT)"},
}


def seed_stock(pid):
    return ((int(pid.split("-")[1]) - 1) * 37 + 11) % 9


class World:
    """A consistent history: one phone that held a spot, checked in, added
    p-0002 to its cart and bought it from the cart (seed stock 3), favorited
    a product, and recorded one telemetry event."""

    def __init__(self, home):
        self.home = home
        os.makedirs(os.path.join(home, "db"))
        os.makedirs(os.path.join(home, "phones"))
        self.db = {}
        for s in SERVICES:
            c = sqlite3.connect(os.path.join(home, "db", s + ".db"))
            c.executescript(SERVICE_SCHEMA + EXTRA.get(s, ""))
            self.db[s] = c
        self.phone = sqlite3.connect(os.path.join(home, "phones", "phone-001.db"))
        self.phone.executescript(PHONE_SCHEMA)
        self.phone.execute("INSERT INTO session VALUES (1, 'u1')")
        cat = self.db["catalog"]
        for n in range(1, 6):
            pid = "p-%04d" % n
            cat.execute("INSERT INTO products VALUES (?, ?)", (pid, seed_stock(pid)))
        self.t = 1_000_000
        # The history.
        self.act("reservations.hold", "h1")
        self.db["reservations"].execute(
            "INSERT INTO reservations VALUES ('h1', 'u1', 'S1', 'checked_out', ?, ?, ?, ?)",
            (self.t - 10, self.t + 600_000, self.t + 50, self.t + 100))
        self.event("reservations", "reservations.held", {"reservation": "h1"})
        self.act("reservations.checkin", "c1")
        self.event("reservations", "reservations.checkedin", {"reservation": "h1"})
        self.act("orders.cart.add", "a1", body={"product": "p-0002", "quantity": 1})
        self.act("orders.place", "o1", body={"source": "cart"})
        self.db["orders"].execute("INSERT INTO orders VALUES ('o1', 'u1', 'confirmed', 'cart', ?, ?)",
                                  (json.dumps([{"product": "p-0002", "quantity": 1}]), self.t))
        cat.execute("INSERT INTO holds VALUES ('o1', 'confirmed', ?, ?)", (self.t, self.t + 60_000))
        cat.execute("INSERT INTO hold_items VALUES ('o1', 'p-0002', 1)")
        cat.execute("UPDATE products SET stock = stock - 1 WHERE id = 'p-0002'")
        self.event("orders", "orders.placed", {"order": "o1"})
        self.event("catalog", "catalog.stock.changed", {"order": "o1", "product": "p-0002", "reason": "hold"})
        self.act("favorites.add", "f1")
        self.act("orders.place", "o2", outcome="rejected", code="conflict", reason="p-0003 is sold out")
        self.record("e1")
        self.db["telemetry"].execute("INSERT INTO events VALUES ('e1', 'phone-001')")
        self.commit()

    def record(self, event):
        """A telemetry event the phone recorded (its history keeps it once sent)."""
        self.phone.execute("INSERT INTO chaos_telemetry VALUES (?, 'view.opened', ?)", (event, self.t))

    def act(self, type, id, outcome="done", code=None, reason=None, applied=True, body=None):
        self.t += 1000
        self.phone.execute("INSERT INTO action_log (id, type, created_ms, finished_ms, outcome, code, reason, attempts) VALUES (?, ?, ?, ?, ?, ?, ?, 1)",
                           (id, type, self.t, self.t + 20, outcome, code, reason))
        self.phone.execute("INSERT INTO chaos_actions VALUES (?, ?, ?, ?)", (id, type, json.dumps(body or {}), self.t))
        if applied:
            kind = "reply" if outcome == "done" else "error"
            self.db[type.split(".")[0]].execute("INSERT INTO idempotency VALUES (?, ?, ?, ?)",
                                                (id, type, json.dumps({"kind": kind}), self.t + 10))

    def event(self, service, type, body):
        c = self.db[service]
        seq = c.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM outbox").fetchone()[0]
        c.execute("INSERT INTO outbox VALUES (?, ?, ?, ?, ?)", (seq, "ev%d" % seq, type, self.t, json.dumps(body)))

    def commit(self):
        for c in self.db.values():
            c.commit()
        self.phone.commit()

    def check(self):
        self.commit()
        env = {k: v for k, v in os.environ.items() if not (k.startswith("QUAD_") and k.endswith("_DB"))}
        out = os.path.join(self.home, "check.json")
        p = subprocess.run([sys.executable, CHECKER, "--home", self.home, "--json", out], capture_output=True, text=True, env=env)
        verdict = json.load(open(out)) if os.path.exists(out) else None
        return p.returncode, p.stdout + p.stderr, verdict


@pytest.fixture
def world(tmp_path):
    return World(str(tmp_path / "home"))


def failed(verdict):
    return sorted(c["name"] for c in verdict["checks"] if not c["ok"])


def bin_dir():
    """Where the services' executables are: QUAD_BIN_DIR (deploy/test sets
    it), else the release build (QUAD_BUILD_DIR or .build)."""
    return os.environ.get("QUAD_BIN_DIR") or os.path.join(os.environ.get("QUAD_BUILD_DIR") or os.path.join(ROOT, ".build"), "release")


def columns(db, table):
    return {row[1] for row in db.execute("SELECT * FROM pragma_table_info(?)", (table,))}


@pytest.mark.parametrize("service", sorted(set(SERVICES)))
def test_the_worlds_tables_are_in_the_store_the_service_migrates(tmp_path, service):
    """The worlds here are built from tables written in this file (EXTRA,
    LATER), the columns the checker reads. Each of those tables, and each of its
    columns, is in the store the service's own migrations make (quad-NAME
    --migrate, as an upgrade runs them): a table or column a migration
    renames or drops fails here, not in a chaos run whose checker finds
    nothing to read."""
    exe = os.path.join(bin_dir(), "quad-" + service)
    assert os.access(exe, os.X_OK), "no %s: build with swift build -c release (or set QUAD_BIN_DIR)" % exe
    path = str(tmp_path / (service + ".db"))
    r = subprocess.run([exe, "--db", path, "--migrate"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "is at its latest schema" in r.stdout, r.stdout + r.stderr
    again = subprocess.run([exe, "--db", path, "--migrate"], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and " 0 of its " in again.stdout, again.stdout + again.stderr
    real = sqlite3.connect(path)
    mine = sqlite3.connect(":memory:")
    mine.executescript(SERVICE_SCHEMA + EXTRA.get(service, "") + "".join(";" + x for x in LATER.get(service, {}).values()))
    tables = [t for (t,) in mine.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
    assert "idempotency" in tables and "outbox" in tables
    for t in tables:
        have = columns(real, t)
        assert have, "the worlds' table %s is not in %s's store (its migrations make: %s)" % (
            t, service, ", ".join(sorted(n for (n,) in real.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))))
        missing = columns(mine, t) - have
        assert not missing, "%s.%s has no column %s (its columns: %s)" % (service, t, ", ".join(sorted(missing)), ", ".join(sorted(have)))


def test_a_consistent_history_passes(world):
    rc, out, verdict = world.check()
    assert rc == 0, out
    assert verdict["valid"] and failed(verdict) == []
    assert verdict["counts"]["attempted"] == 6 and verdict["counts"]["ok"] == 5 and verdict["counts"]["failed"] == 1
    assert "verdict: PASS" in out
    assert "cart ledger: 1 units added, 0 set, 0 removed, 0 cleared, 0 rejected; 1 orders from the cart took 1 units, " \
        "0 units left in carts; 0 applied twice, 0 missing" in out
    assert verdict["telemetry"] == {"recorded": 1, "stored": 1, "missing": 0, "twice": 0, "unmade": 0, "other_phone": 0,
                                    "queued": 0, "conflicting": 0}


def test_an_acknowledged_action_missing_from_its_store_is_lost(world):
    world.db["favorites"].execute("DELETE FROM idempotency WHERE id = 'f1'")
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["lost"], out
    assert verdict["counts"]["lost"] == 1
    assert "f1" in out


def test_a_rejected_action_applied_anyway_is_caught(world):
    world.db["orders"].execute("UPDATE idempotency SET reply = '{\"kind\": \"reply\"}' WHERE id = 'o2'")
    rc, out, verdict = world.check()
    assert rc == 1 and "lost" in failed(verdict), out


def test_an_effect_applied_twice_is_a_duplicate(world):
    # What a service that skipped the idempotency check leaves: the order's
    # event and its stock hold's event a second time.
    world.event("orders", "orders.placed", {"order": "o1"})
    world.event("catalog", "catalog.stock.changed", {"order": "o1", "product": "p-0002", "reason": "hold"})
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["duplicated"], out
    assert verdict["counts"]["duplicated"] == 2
    assert "FAIL" in out and "duplicated" in out


def test_actions_applied_out_of_order_are_caught(world):
    world.db["orders"].execute("UPDATE idempotency SET created_ms = 1 WHERE id = 'o1'")
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["order"], out
    assert verdict["counts"]["out_of_order"] == 1


def test_a_pending_action_means_not_drained(world):
    world.act("favorites.add", "f2", outcome="pending", applied=False)
    world.phone.execute("INSERT INTO outbox (id, type) VALUES ('f2', 'favorites.add')")
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["drained"], out
    assert verdict["counts"]["indeterminate"] == 1


def test_stock_sold_beyond_the_seed_is_caught(world):
    cat = world.db["catalog"]
    cat.execute("INSERT INTO holds VALUES ('o9', 'confirmed', 1, 2)")
    cat.execute("INSERT INTO hold_items VALUES ('o9', 'p-0002', 5)")
    rc, out, verdict = world.check()
    assert rc == 1 and "stock" in failed(verdict), out


def test_a_spot_held_twice_at_once_is_caught(world):
    world.db["reservations"].execute(
        "INSERT INTO reservations SELECT 'h2', 'u2', 'S1', 'held', held_ms + 30, deadline_ms, NULL, NULL FROM reservations WHERE id = 'h1'")
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["spots"], out


def test_a_check_in_after_the_deadline_is_caught(world):
    world.db["reservations"].execute("UPDATE reservations SET checked_in_ms = deadline_ms + 1 WHERE id = 'h1'")
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["deadlines"], out


def test_telemetry_left_on_a_phone_is_caught(world):
    world.phone.execute("INSERT INTO telemetry VALUES ('e2', NULL)")
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["telemetry"], out
    assert verdict["telemetry"]["queued"] == 1 and verdict["telemetry"]["missing"] == 1


def test_a_telemetry_event_sent_but_not_stored_is_missing(world):
    for e in ("e2", "e3"):
        world.record(e)
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["telemetry"], out
    assert verdict["telemetry"]["missing"] == 2 and verdict["telemetry"]["recorded"] == 3
    assert "missing: event e2 recorded by phone-001" in out and "2 missing" in out


def test_a_telemetry_event_stored_twice_is_caught(world):
    world.db["telemetry"].execute("INSERT INTO events VALUES ('e1', 'phone-001')")
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["telemetry"], out
    assert verdict["telemetry"]["twice"] == 1 and "twice: event e1 stored 2 times" in out


def test_a_telemetry_event_no_phone_recorded_is_caught(world):
    world.db["telemetry"].execute("INSERT INTO events VALUES ('e9', 'phone-001')")
    world.db["telemetry"].execute("INSERT INTO events VALUES ('e1', 'phone-002')")
    world.db["telemetry"].execute("DELETE FROM events WHERE rowid = 1")
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["telemetry"], out
    assert verdict["telemetry"]["unmade"] == 1 and verdict["telemetry"]["other_phone"] == 1
    assert "unmade: event e9" in out and "recorded by phone-001, stored under phone-002" in out


def test_without_a_history_telemetry_is_counted_and_the_cart_not_checked(world):
    world.phone.executescript("DROP TABLE chaos_actions; DROP TABLE chaos_telemetry;")
    world.db["orders"].execute("INSERT INTO cart_lines VALUES ('u1', 'p-0004', 2)")
    rc, out, verdict = world.check()
    assert rc == 0, out
    assert "counts only (the phones kept no history)" in out and "cart ledger n/a" in out


def test_a_cart_add_applied_twice_is_a_duplicate(world):
    # What a retried orders.cart.add leaves when the service applies it again:
    # one unit more than the phones added (here, still in the cart).
    world.act("orders.cart.add", "a2", body={"product": "p-0004", "quantity": 1})
    world.db["orders"].execute("INSERT INTO cart_lines VALUES ('u1', 'p-0004', 2)")
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["duplicated"], out
    assert verdict["counts"]["duplicated"] == 1
    assert "1 applied twice" in out and "user u1: the cart in the orders store has 2 of p-0004, the replay 1 (1 applied twice)" in out


def test_a_cart_unit_bought_beyond_what_was_added_is_a_duplicate(world):
    world.db["orders"].execute("""UPDATE orders SET items = '[{"product": "p-0002", "quantity": 3}]' WHERE id = 'o1'""")
    rc, out, verdict = world.check()
    assert "duplicated" in failed(verdict), out
    assert verdict["counts"]["duplicated"] == 2


def test_a_cart_add_done_without_its_unit_is_lost(world):
    world.act("orders.cart.add", "a2", body={"product": "p-0004", "quantity": 2})
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["lost"], out
    assert verdict["counts"]["lost"] == 2 and "2 cart units missing" in out


CART_VERSIONS = itertools.count(1)


def cart_reply(cart):
    """The reply envelope orders keeps for a cart action: the cart after it,
    at its version (the checker reads the lines only)."""
    return json.dumps({"kind": "reply", "body": {"lines": [{"product": p, "quantity": q} for p, q in cart.items()],
                                                 "version": next(CART_VERSIONS)}})


def keep_reply(world, ident, cart):
    world.db["orders"].execute("UPDATE idempotency SET reply = ? WHERE id = ?", (cart_reply(cart), ident))


def test_set_remove_and_clear_are_replayed_with_the_orders_from_the_cart(world):
    # After o1: add 2 of p-0004, set it to 3, add p-0005, remove it, a set
    # refused (nothing changes), place the cart (3 of p-0004), add p-0001,
    # clear, add 1 of p-0003: the store holds 1 of p-0003 and o3 bought 3 of p-0004.
    world.act("orders.cart.add", "a2", body={"product": "p-0004", "quantity": 2})
    world.act("orders.cart.set", "s1", body={"product": "p-0004", "quantity": 3})
    world.act("orders.cart.add", "a3", body={"product": "p-0005", "quantity": 1})
    world.act("orders.cart.remove", "r1", body={"product": "p-0005"})
    world.act("orders.cart.set", "s2", outcome="rejected", code="not_found", reason="no product p-9999", body={"product": "p-9999", "quantity": 2})
    world.act("orders.place", "o3", body={"source": "cart"})
    world.db["orders"].execute("INSERT INTO orders VALUES ('o3', 'u1', 'confirmed', 'cart', ?, ?)",
                               (json.dumps([{"product": "p-0004", "quantity": 3}]), world.t))
    world.act("orders.cart.add", "a4", body={"product": "p-0001", "quantity": 1})
    world.act("orders.cart.clear", "c2")
    world.act("orders.cart.add", "a5", body={"product": "p-0003", "quantity": 1})
    for ident, cart in (("a2", {"p-0004": 2}), ("s1", {"p-0004": 3}), ("a3", {"p-0004": 3, "p-0005": 1}), ("r1", {"p-0004": 3}),
                        ("a4", {"p-0001": 1}), ("c2", {}), ("a5", {"p-0003": 1})):
        keep_reply(world, ident, cart)
    world.db["orders"].execute("INSERT INTO cart_lines VALUES ('u1', 'p-0003', 1)")
    stock_hold(world, "o3", "p-0004", 3)
    rc, out, verdict = world.check()
    assert rc == 0, out
    assert "cart ledger: 6 units added, 1 set, 1 removed, 1 cleared, 1 rejected; 2 orders from the cart took 4 units, " \
        "1 units left in carts; 0 applied twice, 0 missing" in out


def stock_hold(world, order, product, quantity):
    """The catalog's side of a confirmed order: its hold, units out of stock."""
    cat = world.db["catalog"]
    cat.execute("INSERT INTO holds VALUES (?, 'confirmed', ?, ?)", (order, world.t, world.t + 60_000))
    cat.execute("INSERT INTO hold_items VALUES (?, ?, ?)", (order, product, quantity))
    cat.execute("UPDATE products SET stock = stock - ? WHERE id = ?", (quantity, product))


def test_an_add_applied_again_then_overwritten_by_a_set_is_caught_by_what_the_phone_was_told(world):
    # The add's first application is the stored reply (1 unit); the retry,
    # applied again, answered the phone 2; the set on the same line hides it
    # from the store's carts: only the phone's record of its answer shows it.
    world.phone.execute("ALTER TABLE action_log ADD COLUMN cart TEXT")
    world.act("orders.cart.add", "a2", body={"product": "p-0004", "quantity": 1})
    world.act("orders.cart.set", "s1", body={"product": "p-0004", "quantity": 3})
    keep_reply(world, "a2", {"p-0004": 1})
    keep_reply(world, "s1", {"p-0004": 3})
    world.phone.execute("""UPDATE action_log SET cart = '{"p-0004": 2}' WHERE id = 'a2'""")
    world.phone.execute("""UPDATE action_log SET cart = '{"p-0004": 3}' WHERE id = 's1'""")
    world.db["orders"].execute("INSERT INTO cart_lines VALUES ('u1', 'p-0004', 3)")
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["duplicated"], out
    assert verdict["counts"]["duplicated"] == 1
    assert "the reply phone-001 was told for orders.cart.add a2 has 2 of p-0004, the replay 1 (1 applied twice)" in out


def test_a_removal_the_store_did_not_apply_is_lost(world):
    # The phone saw the removal done; the store still holds the line.
    world.act("orders.cart.add", "a2", body={"product": "p-0004", "quantity": 2})
    world.act("orders.cart.remove", "r1", body={"product": "p-0004"})
    world.db["orders"].execute("INSERT INTO cart_lines VALUES ('u1', 'p-0004', 2)")
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["duplicated"], out
    assert "the cart in the orders store has 2 of p-0004, the replay 0" in out


def test_an_order_from_the_cart_that_took_other_lines_is_caught(world):
    # The cart held 2 of p-0004 when o3 was placed; the order took 1 of p-0005.
    world.act("orders.cart.add", "a2", body={"product": "p-0004", "quantity": 2})
    world.act("orders.place", "o3", body={"source": "cart"})
    world.db["orders"].execute("INSERT INTO orders VALUES ('o3', 'u1', 'confirmed', 'cart', ?, ?)",
                               (json.dumps([{"product": "p-0005", "quantity": 1}]), world.t))
    stock_hold(world, "o3", "p-0005", 1)
    world.db["orders"].execute("INSERT INTO cart_lines VALUES ('u1', 'p-0004', 2)")
    rc, out, verdict = world.check()
    assert rc == 1 and sorted(failed(verdict)) == ["duplicated", "lost"], out
    assert "order o3 from the cart has 1 of p-0005, the replay 0 (1 applied twice)" in out
    assert "order o3 from the cart has 0 of p-0004, the replay 2 (2 missing)" in out


def test_a_queued_action_counts_as_its_idempotency_record_says(world):
    # Still queued at the end: the add the store applied (its record) is in
    # the replay; the one it never saw is not. Neither is a duplicate or lost.
    world.act("orders.cart.add", "a2", outcome="pending", body={"product": "p-0004", "quantity": 1})
    world.act("orders.cart.add", "a3", outcome="pending", applied=False, body={"product": "p-0005", "quantity": 1})
    world.db["orders"].execute("UPDATE idempotency SET reply = '{\"kind\": \"reply\"}' WHERE id = 'a2'")
    world.db["orders"].execute("INSERT INTO cart_lines VALUES ('u1', 'p-0004', 1)")
    rc, out, verdict = world.check()
    assert failed(verdict) == ["drained"], out
    assert "0 applied twice, 0 missing" in out


def test_the_history_recorder_keeps_what_a_phone_deletes(tmp_path):
    folder = tmp_path / "phones"
    folder.mkdir()
    db = sqlite3.connect(str(folder / "phone-001.db"), isolation_level=None)
    db.executescript("""
        PRAGMA journal_mode=WAL;
        CREATE TABLE outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, type TEXT NOT NULL, body TEXT NOT NULL,
                             created_ms BIGINT NOT NULL);
        CREATE TABLE telemetry (id TEXT PRIMARY KEY, name TEXT NOT NULL, ts BIGINT NOT NULL, batch TEXT);
        INSERT INTO outbox (id, type, body, created_ms) VALUES ('a1', 'orders.cart.add', '{"product": "p-0001"}', 1);
        INSERT INTO telemetry VALUES ('e1', 'view.opened', 1, NULL);
    """)
    p = subprocess.run([sys.executable, CHECKER, "--phones", str(folder), "--install-history", "1", "--wait", "10"],
                       capture_output=True, text=True)
    assert p.returncode == 0 and "installed in 1 phone files" in p.stdout, p.stdout + p.stderr
    # The phone goes on: sends, deletes, writes more.
    db.executescript("""
        DELETE FROM outbox; DELETE FROM telemetry;
        INSERT INTO outbox (id, type, body, created_ms) VALUES ('a2', 'favorites.add', '{"product": "p-0002"}', 2);
        INSERT INTO telemetry VALUES ('e2', 'search.performed', 2, NULL);
        DELETE FROM telemetry WHERE id = 'e2';
    """)
    assert [r[0] for r in db.execute("SELECT id FROM chaos_actions ORDER BY id")] == ["a1", "a2"]
    assert [r[0] for r in db.execute("SELECT id FROM chaos_telemetry ORDER BY id")] == ["e1", "e2"]
    assert json.loads(db.execute("SELECT body FROM chaos_actions WHERE id = 'a1'").fetchone()[0]) == {"product": "p-0001"}


def test_the_history_recorder_times_out_when_phones_are_missing(tmp_path):
    folder = tmp_path / "phones"
    folder.mkdir()
    p = subprocess.run([sys.executable, CHECKER, "--phones", str(folder), "--install-history", "2", "--wait", "1"],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "only 0 of 2 phone files" in p.stderr


def test_unreadable_stores_exit_2(tmp_path):
    home = tmp_path / "empty"
    (home / "phones").mkdir(parents=True)
    p = subprocess.run([sys.executable, CHECKER, "--home", str(home)], capture_output=True, text=True)
    assert p.returncode == 2 and "no phone files" in p.stderr


def check_with_faults(world, lines, tolerance=None):
    """The checker with a faults.log of `lines` ("[  10s] ..."), t0 at the
    world's start (1_000_000 ms)."""
    world.commit()
    log = os.path.join(world.home, "faults.log")
    with open(log, "w") as f:
        f.write("".join(l + "\n" for l in lines))
    env = {k: v for k, v in os.environ.items() if not (k.startswith("QUAD_") and k.endswith("_DB"))}
    out = os.path.join(world.home, "check.json")
    args = [sys.executable, CHECKER, "--home", world.home, "--json", out, "--faults", log, "--t0", "1000000"]
    if tolerance is not None:
        args += ["--skew-tolerance", str(tolerance)]
    p = subprocess.run(args, capture_output=True, text=True, env=env)
    verdict = json.load(open(out)) if os.path.exists(out) else None
    return p.returncode, p.stdout + p.stderr, verdict


def figures(verdict, name):
    return next(c["figures"] for c in verdict["checks"] if c["name"] == name)


def test_without_a_broker_death_the_brokers_check_is_na(world):
    rc, out, verdict = world.check()
    assert rc == 0 and "n/a (no broker died)" in figures(verdict, "brokers"), out


def test_an_action_answered_just_before_a_broker_died_and_lost_is_caught(world):
    # Answered at t+20 ms, no record in favorites; broker 2 SIGKILLed 1 s later.
    world.act("favorites.add", "f9", applied=False)
    at_s = (world.t + 1000 - 1_000_000) // 1000 + 1
    rc, out, verdict = check_with_faults(world, ["[%4ds] broker: kill broker 2 (supervisord restarts it)" % at_s])
    assert rc == 1 and failed(verdict) == ["brokers", "lost"], out
    assert "1 broker deaths" in figures(verdict, "brokers") and ", 1 lost" in figures(verdict, "brokers"), out


def test_actions_around_a_broker_death_that_are_applied_pass(world):
    rc, out, verdict = check_with_faults(world, ["[   3s] broker: kill broker 1 (supervisord restarts it)"])
    assert rc == 0, out
    assert "1 broker deaths" in figures(verdict, "brokers") and ", 0 lost" in figures(verdict, "brokers"), out


def test_a_hold_expired_early_beyond_the_tolerance_is_caught(world):
    # h2: a 10-minute hold, expired 200 s before its deadline.
    world.db["reservations"].execute(
        "INSERT INTO reservations VALUES ('h2', 'u2', 'S2', 'expired', ?, ?, NULL, ?)",
        (world.t, world.t + 600_000, world.t + 400_000))
    rc, out, verdict = check_with_faults(world, [], tolerance=95)
    assert rc == 1 and failed(verdict) == ["holds"], out
    assert "1 early, 0 late" in figures(verdict, "holds"), out
    # 60 s early is within a 95 s skew tolerance; not within 5 s.
    world.db["reservations"].execute("UPDATE reservations SET ended_ms = deadline_ms - 60000 WHERE id = 'h2'")
    rc, out, verdict = check_with_faults(world, [], tolerance=95)
    assert rc == 0, out
    rc, out, verdict = check_with_faults(world, [], tolerance=5)
    assert rc == 1 and failed(verdict) == ["holds"], out


def test_a_hold_never_expired_is_late(world):
    # Held, with its deadline long before the phone's last answer.
    world.db["reservations"].execute(
        "INSERT INTO reservations VALUES ('h2', 'u2', 'S2', 'held', 1000, 2000, NULL, NULL)")
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["holds"], out
    assert "0 early, 1 late" in figures(verdict, "holds"), out


def test_a_check_in_late_in_real_time_is_caught_though_stamped_in_time(world):
    # A 60 s hold; the phone checked in 200 s after it was held, and a worker
    # whose clock ran 150 s slow stamped the check-in before the deadline.
    world.act("reservations.hold", "h3")
    held = world.t
    world.db["reservations"].execute(
        "INSERT INTO reservations VALUES ('h3', 'u1', 'S3', 'checked_in', ?, ?, ?, NULL)", (held, held + 60_000, held + 50_000))
    world.t += 200_000
    world.act("reservations.checkin", "c3", body={"reservation": "h3"})
    rc, out, verdict = check_with_faults(world, [], tolerance=95)
    assert rc == 1 and failed(verdict) == ["holds"], out
    assert "0 early, 1 late" in figures(verdict, "holds"), out


def test_a_skewed_clock_excuses_the_order_of_what_it_stamped(world):
    # o1 stamped far in the past by orders while its clock was skewed.
    world.db["orders"].execute("UPDATE idempotency SET created_ms = 1 WHERE id = 'o1'")
    lines = ["[   0s] clock: orders/1 -90s (restarted with its wall clock off by -90 s)",
             "[  60s] clock: orders/1 restored (restarted on the real clock)"]
    rc, out, verdict = check_with_faults(world, lines, tolerance=95)
    assert rc == 0, out
    assert "3 applied by a worker on a skewed clock not compared" in figures(verdict, "order"), out
    # The same stamp with no clock fault is out of order.
    rc, out, verdict = check_with_faults(world, [], tolerance=95)
    assert rc == 1 and failed(verdict) == ["order"], out


def test_fault_windows_have_a_kind_each():
    sys.path.insert(0, os.path.join(ROOT, "deploy"))
    import checker
    import tempfile
    lines = ["[   5s] partition phones | broker", "[   9s] heal phones | broker",
             "[  10s] broker: kill broker 2 (supervisord restarts it)",
             "[  12s] broker: partition phones | broker-2", "[  15s] broker: heal phones | broker-2",
             "[  20s] pg: restart postgres (starting)", "[  23s] pg: restart postgres done",
             "[  25s] pg: partition catalog | pg", "[  30s] pg: heal catalog | pg",
             "[  31s] edge: kill quad-edge (pid 9, SIGKILL; restarted in 2 s for the last 40 s of the day)",
             "[  33s] edge: quad-edge restarted (pid 10, --duration 40, same --dir)",
             "[  35s] clock: reservations/1 +73s (restarted with its wall clock off by +73 s)",
             "[  50s] clock: reservations/1 restored (restarted on the real clock)"]
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write("\n".join(lines) + "\n")
    windows = checker.fault_windows(f.name)
    kinds = sorted((w["kind"], w["start"], w["end"]) for w in windows)
    assert kinds == [("broker", 10, 12.0), ("broker", 12, 15), ("clock", 35, 50), ("edge", 31, 34), ("partition", 5, 9),
                     ("pg", 20, 23), ("pg", 25, 30)], windows
    events = checker.fault_events(f.name, 1_000_000)
    assert events["broker_kills"] == [("2", 1_010_000)]
    assert events["clock"]["reservations"] == [(1_034_000, 1_055_000)]
    os.unlink(f.name)


def test_a_hold_cancelled_on_another_clock_than_it_was_held_is_not_a_spot_held_twice(world):
    # B was held by a worker 86 s fast, then cancelled after the worker was
    # restarted on the real clock: its stamps end before they begin. A came
    # later (real clock) and is still checked in. By the stamps B starts
    # inside A; in real time B was over before A began.
    b = "0000000f-6950-7000-8000-000000000000"  # 1_010_000 ms
    a = "00000010-2ca0-7000-8000-000000000000"  # 1_060_000 ms
    res = world.db["reservations"]
    res.execute("INSERT INTO reservations VALUES (?, 'u5', 'S8', 'cancelled', 1096000, 1141000, NULL, 1012000)", (b,))
    res.execute("INSERT INTO reservations VALUES (?, 'u6', 'S8', 'checked_in', 1060000, 1105000, 1061000, NULL)", (a,))
    lines = ["[   0s] clock: reservations/1 +86s (restarted with its wall clock off by +86 s)",
             "[  10s] clock: reservations/1 restored (restarted on the real clock)"]
    rc, out, verdict = check_with_faults(world, lines, tolerance=95)
    assert "spots" not in failed(verdict), out
    rc, out, verdict = check_with_faults(world, [], tolerance=5)
    assert "spots" in failed(verdict), out


def test_holds_stamped_by_a_skewed_clock_are_not_a_spot_held_twice(world):
    # B was made first (its UUIDv7 id holds the phone's time, inside the
    # reservations skew window) by a worker 60 s fast, and expired; A came
    # after it on a real clock and is still held: by the stamps B starts
    # after A.
    b = "0000000f-69b0-7000-8000-000000000000"  # 1_010_000 ms
    a = "0000000f-8d00-7000-8000-000000000000"  # 1_019_040 ms
    res = world.db["reservations"]
    res.execute("INSERT INTO reservations VALUES (?, 'u3', 'S9', 'expired', 1070000, 1115000, NULL, 1115100)", (b,))
    res.execute("INSERT INTO reservations VALUES (?, 'u4', 'S9', 'held', 1019040, 99999999999, NULL, NULL)", (a,))
    lines = ["[   0s] clock: reservations/1 +60s (restarted with its wall clock off by +60 s)",
             "[  30s] clock: reservations/1 restored (restarted on the real clock)"]
    rc, out, verdict = check_with_faults(world, lines, tolerance=95)
    assert "spots" not in failed(verdict), out
    # The same stamps with no clock moved: a spot held twice.
    rc, out, verdict = check_with_faults(world, [], tolerance=5)
    assert "spots" in failed(verdict), out


# Rentals that come back (issue 16): a returned rental's hold is released, its
# units came back exactly once (one catalog.stock.changed release per product
# of the order), and listings, which have no seed stock, are skipped and counted.

def rent_and_return(world, order="r1", product="p-0004", returned=True):
    """p-0004 (seed stock 5) rented and, if `returned`, returned: the hold
    confirmed then released, one unit out and back."""
    orders, cat = world.db["orders"], world.db["catalog"]
    if "mode" not in [c[1] for c in orders.execute("PRAGMA table_info(orders)")]:
        orders.execute(LATER["orders"]["orders/mode"])
    world.act("orders.place", order, body={"source": "buy_now", "product": product, "mode": "rent"})
    orders.execute("INSERT INTO orders (id, user_id, status, source, items, updated_ms, mode) VALUES (?, 'u1', ?, 'buy_now', ?, ?, 'rent')",
                   (order, "returned" if returned else "confirmed", json.dumps([{"product": product, "quantity": 1}]), world.t))
    cat.execute("INSERT INTO holds VALUES (?, ?, ?, ?)", (order, "released" if returned else "confirmed", world.t, world.t + 60_000))
    cat.execute("INSERT INTO hold_items VALUES (?, ?, 1)", (order, product))
    world.event("orders", "orders.placed", {"order": order})
    world.event("catalog", "catalog.stock.changed", {"order": order, "product": product, "reason": "hold"})
    if returned:
        # Orders keeps no idempotency record for a return (idempotent by order).
        world.act("orders.return", order + "-back", body={"order": order}, applied=False)
        orders.execute("UPDATE orders SET updated_ms = ? WHERE id = ?", (world.t + 10, order))  # when the return committed
        world.event("orders", "orders.returned", {"order": order})
        world.event("catalog", "catalog.stock.changed", {"order": order, "product": product, "reason": "released"})
    else:
        cat.execute("UPDATE products SET stock = stock - 1 WHERE id = ?", (product,))


def stock_figures(verdict):
    return next(c["figures"] for c in verdict["checks"] if c["name"] == "stock")


def test_a_rental_returned_once_passes_with_its_units_counted(world):
    rent_and_return(world)
    rent_and_return(world, order="r2", product="p-0005", returned=False)
    rc, out, verdict = world.check()
    assert rc == 0, out
    assert verdict["stock_units"] == {"sold": 1, "rented_out": 1, "returned": 1, "in_stock": sum(seed_stock("p-%04d" % n) for n in range(1, 6)) - 2,
                                      "listings": 0, "listed_units": 0}
    assert "1 sold, 1 rented out, 1 returned to stock" in stock_figures(verdict)


def test_a_return_whose_units_came_back_twice_is_caught(world):
    # What a catalog that released a returned rental's hold twice leaves:
    # a second release event and one unit too many in stock.
    rent_and_return(world)
    world.event("catalog", "catalog.stock.changed", {"order": "r1", "product": "p-0004", "reason": "released"})
    world.db["catalog"].execute("UPDATE products SET stock = stock + 1 WHERE id = 'p-0004'")
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["duplicated", "stock"], out
    assert "returned rental r1: 1 units of p-0004 came back 2 times (once expected)" in out
    assert "p-0004: seed stock 5, now 6, held or sold 0" in out


def test_a_returned_rental_whose_hold_is_still_confirmed_is_caught(world):
    rent_and_return(world)
    cat = world.db["catalog"]
    cat.execute("UPDATE holds SET status = 'confirmed' WHERE order_id = 'r1'")
    cat.execute("DELETE FROM outbox WHERE body LIKE '%released%'")
    cat.execute("UPDATE products SET stock = stock - 1 WHERE id = 'p-0004'")
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["saga", "stock"], out
    assert "order r1 is returned, its stock hold is confirmed" in out
    assert "came back 0 times" in out


def test_a_release_for_an_order_still_rented_is_caught(world):
    rent_and_return(world, returned=False)
    world.event("catalog", "catalog.stock.changed", {"order": "r1", "product": "p-0004", "reason": "released"})
    rc, out, verdict = world.check()
    assert rc == 1 and "stock" in failed(verdict), out
    assert "order r1 is confirmed, yet p-0004's units were released 1 times" in out


def listed(world, lid, quantity, unlisted, stock):
    """A student's listing as catalog keeps it: a product, and its row in listings."""
    cat = world.db["catalog"]
    if not cat.execute("SELECT 1 FROM sqlite_master WHERE name = 'listings'").fetchone():
        cat.execute(LATER["catalog"]["listings"])
    cat.execute("INSERT INTO listings VALUES (?, ?, ?)", (lid, quantity, unlisted))
    cat.execute("INSERT INTO products VALUES (?, ?)", (lid, stock))


def test_a_listing_balances_against_its_own_quantity(world):
    # 3 on offer, 1 sold (a confirmed hold), 2 in stock; 1 more was withdrawn earlier.
    listed(world, "l-0190f4c2", 3, 1, 2)
    cat = world.db["catalog"]
    cat.execute("INSERT INTO holds VALUES ('o-l1', 'confirmed', ?, ?)", (world.t, world.t + 60_000))
    cat.execute("INSERT INTO hold_items VALUES ('o-l1', 'l-0190f4c2', 1)")
    rc, out, verdict = world.check()
    assert rc == 0, out
    assert verdict["stock_units"]["listings"] == 1 and verdict["stock_units"]["listed_units"] == 4
    assert "1 listings of 4 units ever listed" in stock_figures(verdict)


def test_a_listing_sold_twice_is_caught(world):
    # Quantity 1, and two confirmed holds of it: one unit sold twice.
    listed(world, "l-0190f4c3", 1, 0, 0)
    cat = world.db["catalog"]
    for order in ("o-a", "o-b"):
        cat.execute("INSERT INTO holds VALUES (?, 'confirmed', ?, ?)", (order, world.t, world.t + 60_000))
        cat.execute("INSERT INTO hold_items VALUES (?, 'l-0190f4c3', 1)", (order,))
    rc, out, verdict = world.check()
    assert rc == 1 and "stock" in failed(verdict), out
    assert "listing l-0190f4c3: quantity 1, now 0 in stock, held or sold 2" in out


def test_a_listing_product_without_its_listing_row_is_caught(world):
    world.db["catalog"].execute(LATER["catalog"]["listings"])
    world.db["catalog"].execute("INSERT INTO products VALUES ('l-0190f4c4', 3)")
    rc, out, verdict = world.check()
    assert rc == 1 and "stock" in failed(verdict), out
    assert "l-0190f4c4 is a product with no row in listings" in out


def test_a_return_done_on_the_phone_whose_rental_is_not_returned_is_lost(world):
    rent_and_return(world, returned=False)
    world.act("orders.return", "r1-back", body={"order": "r1"}, applied=False)
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["lost"], out
    assert "orders.return r1-back: done on the phone, no record in orders" in out


def test_a_return_is_found_through_the_phones_returns_without_a_history(world):
    rent_and_return(world)
    world.phone.execute("CREATE TABLE returns (rental TEXT PRIMARY KEY, action TEXT, status TEXT NOT NULL)")
    world.phone.execute("INSERT INTO returns VALUES ('r1', 'r1-back', 'returned')")
    world.phone.execute("DROP TABLE chaos_actions")
    world.phone.execute("DROP TABLE chaos_telemetry")
    rc, out, verdict = world.check()
    assert rc == 0, out


# The session guarantees (issue 30): a phone's session log (the `shown`
# table, quad-edge --record-views on) and its saved copies, against the
# orders' and products' versions in the stores.

SESSION_SCHEMA = """
CREATE TABLE shown (n INTEGER PRIMARY KEY AUTOINCREMENT, at_ms INTEGER NOT NULL, kind TEXT NOT NULL,
                    view TEXT NOT NULL, object TEXT NOT NULL, version INTEGER NOT NULL, action TEXT);
CREATE TABLE orders (id TEXT PRIMARY KEY, version INTEGER NOT NULL DEFAULT 0, pending TEXT);
CREATE TABLE saved (key TEXT PRIMARY KEY, body TEXT NOT NULL);
"""


def with_sessions(world):
    """The world's phone with a consistent session log: it viewed p-0002 at
    versions 3 then 5, placed order o1 (acknowledged at version 7), saw it
    listed, returned rental o9 read at version 4 (answered at 6), and keeps
    o1, o9 and p-0002 at the stores' versions."""
    world.phone.executescript(SESSION_SCHEMA)
    world.db["orders"].executescript(LATER["orders"]["orders/version"] + ";"
                                     "INSERT INTO orders VALUES ('o9', 'u1', 'returned', 'buy_now', '[]', 1, 6);"
                                     "UPDATE orders SET version = 7 WHERE id = 'o1';")
    world.db["catalog"].executescript(LATER["catalog"]["products/version"] + ";"
                                      "UPDATE products SET version = 5 WHERE id = 'p-0002';"
                                      "INSERT INTO holds VALUES ('o9', 'released', 1, 2);")
    rows = [(10, "view", "product", "product:p-0002", 3, None), (11, "view", "home", "product:p-0002", 5, None),
            (12, "act", "orders.place", "product:p-0002", 5, "o1"), (13, "ack", "orders.place", "order:o1", 7, "o1"),
            (14, "view", "orders", "order:o1", 7, None), (14, "view", "orders", "view:orders", 0, None),
            (15, "view", "rentals", "order:o9", 4, None), (16, "act", "orders.return", "order:o9", 4, "r1"),
            (17, "ack", "orders.return", "order:o9", 6, "r1"), (18, "view", "orders", "order:o1", 7, None),
            (18, "view", "orders", "view:orders", 0, None), (18, "view", "orders", "order:o9", 6, None)]
    world.phone.executemany("INSERT INTO shown (at_ms, kind, view, object, version, action) VALUES (?, ?, ?, ?, ?, ?)", rows)
    world.phone.executescript("INSERT INTO orders VALUES ('o1', 7, NULL); INSERT INTO orders VALUES ('o9', 6, NULL);")
    world.phone.execute("INSERT INTO saved VALUES (?, ?)", ('catalog.product.get {"id":"p-0002"}', json.dumps({"id": "p-0002", "version": 5})))
    return world


def session_figures(world):
    rc, out, verdict = world.check()
    return rc, out, verdict, {c["name"]: c for c in verdict["checks"]}


def test_without_a_session_log_the_session_checks_are_na(world):
    rc, out, verdict, checks = session_figures(world)
    assert rc == 0, out
    for name in ("monotonic", "ryw", "wfr", "converged"):
        assert checks[name]["ok"] and checks[name]["figures"].startswith("n/a"), out


def test_a_consistent_session_log_passes_with_its_counts(world):
    rc, out, verdict, checks = session_figures(with_sessions(world))
    assert rc == 0 and failed(verdict) == [], out
    assert verdict["sessions"] == {"phones": 1, "reads": 8, "monotonic_violations": 0, "ryw_reads": 3, "orders_listed": 2,
                                   "ryw_violations": 0, "writes": 1, "wfr_violations": 0, "converged_copies": 3, "not_converged": 0}


def test_a_view_older_than_one_shown_before_fails_monotonic_reads(world):
    with_sessions(world).phone.execute("INSERT INTO shown (at_ms, kind, view, object, version) VALUES (19, 'view', 'home', 'product:p-0002', 4)")
    rc, out, verdict, checks = session_figures(world)
    assert rc == 1 and failed(verdict) == ["monotonic"], out
    assert "1 went back" in checks["monotonic"]["figures"] and "product:p-0002 at version 4" in checks["monotonic"]["examples"][0], out


def test_an_orders_view_without_an_acknowledged_order_fails_read_your_writes(world):
    with_sessions(world).phone.execute("DELETE FROM shown WHERE at_ms = 18 AND object = 'order:o1'")
    rc, out, verdict, checks = session_figures(world)
    assert rc == 1 and failed(verdict) == ["ryw"], out
    assert "1 missing" in checks["ryw"]["figures"] and "did not list order:o1" in checks["ryw"]["examples"][0], out


def test_an_older_version_of_what_an_action_made_fails_read_your_writes(world):
    # The first view after the acknowledgement shows o1 older than it was made.
    with_sessions(world).phone.execute("UPDATE shown SET version = 6 WHERE at_ms = 14 AND object = 'order:o1'")
    rc, out, verdict, checks = session_figures(world)
    assert rc == 1 and failed(verdict) == ["ryw"], out
    assert "order:o1 at version 6 after orders.place made version 7" in checks["ryw"]["examples"][0], out


def test_a_write_answered_at_the_version_read_fails_writes_follow_reads(world):
    with_sessions(world).phone.execute("UPDATE shown SET version = 4 WHERE kind = 'ack' AND object = 'order:o9'")
    world.phone.execute("DELETE FROM shown WHERE at_ms = 18 AND object = 'order:o9'")
    world.phone.execute("UPDATE orders SET version = 6 WHERE id = 'o9'")
    rc, out, verdict, checks = session_figures(world)
    assert rc == 1 and failed(verdict) == ["wfr"], out
    assert "orders.return r1 on order:o9 held at version 4 was answered at version 4" in checks["wfr"]["examples"][0], out


def test_a_saved_copy_behind_the_service_fails_convergence(world):
    with_sessions(world).db["catalog"].execute("UPDATE products SET version = 8 WHERE id = 'p-0002'")
    rc, out, verdict, checks = session_figures(world)
    assert rc == 1 and failed(verdict) == ["converged"], out
    assert "keeps product p-0002 at version 5; the service has 8" in checks["converged"]["examples"][0], out


# A phone file rolled back (deploy/chaos's disk fault: quadctl phone fault
# PHONE rollback): the file the rollback replaced is kept as
# FILE.rolledback-MS, and the checker reads the phone's history across both.

def roll_back(world, after):
    """The phone file as it is now is the snapshot; `after(world)` writes
    what the file then loses; the file it had is kept beside it as a
    rollback keeps it, and the snapshot put back."""
    world.commit()
    path = os.path.join(world.home, "phones", "phone-001.db")
    snapshot = sqlite3.connect(path + ".snapshot")
    world.phone.backup(snapshot)
    snapshot.close()
    after(world)
    world.commit()
    world.phone.close()
    os.rename(path, path + ".rolledback-1765000000000")
    os.rename(path + ".snapshot", path)
    world.phone = sqlite3.connect(path)


def lost_after_the_snapshot(world):
    # Sent and applied, its answer seen: the services have it.
    world.act("favorites.add", "f9")
    # Queued, never answered, never applied: the device's loss.
    world.act("favorites.add", "f10", outcome="pending", applied=False)
    world.phone.execute("INSERT INTO outbox (id, type) VALUES ('f10', 'favorites.add')")
    # One event sent and stored, one still queued when the file lost it.
    world.record("e5")
    world.db["telemetry"].execute("INSERT INTO events VALUES ('e5', 'phone-001')")
    world.record("e6")
    world.phone.execute("INSERT INTO telemetry VALUES ('e6', NULL)")


def test_what_a_rolled_back_phone_file_lost_is_the_devices_loss_not_the_systems(world):
    roll_back(world, lost_after_the_snapshot)
    rc, out, verdict = world.check()
    assert rc == 0, out
    assert verdict["valid"] and failed(verdict) == []
    assert verdict["counts"]["forgotten"] == 1 and verdict["counts"]["device_lost"] == 1, verdict["counts"]
    assert verdict["counts"]["device_lost_events"] == 1, verdict["counts"]
    lost = [c for c in verdict["checks"] if c["name"] == "lost"][0]
    assert "1 actions lost with rolled-back phone files" in lost["figures"] and "1 telemetry events lost queued" in lost["figures"], lost
    # f9, applied, and e5, stored, are the phone's though its file forgot them.
    assert verdict["telemetry"]["unmade"] == 0 and verdict["telemetry"]["missing"] == 0


def test_without_the_replaced_file_what_the_phone_forgot_looks_made_by_no_phone(world):
    roll_back(world, lost_after_the_snapshot)
    for f in os.listdir(os.path.join(world.home, "phones")):
        if ".rolledback-" in f:
            os.remove(os.path.join(world.home, "phones", f))
    rc, out, verdict = world.check()
    assert rc == 1 and "telemetry" in failed(verdict), out
    assert verdict["telemetry"]["unmade"] == 1


def test_an_acknowledged_action_a_rolled_back_file_forgot_must_still_be_applied(world):
    def acknowledged_then_lost(w):
        w.act("favorites.add", "f11", applied=False)
    roll_back(world, acknowledged_then_lost)
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["lost"], out
    assert "f11: done on the phone, no record in favorites" in out


def conflict_after_rollback(world, props_sent):
    """e5 stored as the lost file sent it; the rolled-back phone sends it
    again in a batch formed anew: a delivery the collector kept aside."""
    t = world.db["telemetry"]
    t.executescript(LATER["telemetry"]["events/payload"])
    t.execute("UPDATE events SET session = 's1', name = 'view.opened', ts = 5, offline = 0, props = '{\"view\":\"home\"}'")
    t.execute(LATER["telemetry"]["event_conflicts"])
    payload = {"id": "e5", "phone": "phone-001", "session": "s1", "name": "view.opened", "ts": 5, "offline": False,
               "queued_ms": 900, "props": props_sent}
    t.execute("INSERT INTO event_conflicts VALUES ('e5', 'd2', ?, 1, 1, 1)", (json.dumps(payload),))
    t.execute("UPDATE ingest_totals SET conflicting = 1")


def test_an_event_a_rolled_back_phone_sends_again_with_another_queued_ms_is_not_a_conflict(world):
    roll_back(world, lost_after_the_snapshot)
    conflict_after_rollback(world, {"view": "home"})
    rc, out, verdict = world.check()
    assert rc == 0, out
    examples = [c for c in verdict["checks"] if c["name"] == "telemetry"][0]["examples"]
    assert verdict["telemetry"]["conflicting"] == 0 and any("only in queued_ms" in e for e in examples), examples


def test_an_event_sent_again_with_other_props_after_a_rollback_is_still_a_conflict(world):
    roll_back(world, lost_after_the_snapshot)
    conflict_after_rollback(world, {"view": "cart"})
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["telemetry"], out
    assert verdict["telemetry"]["conflicting"] == 1


def start_over_after_damage(world, kind):
    """The phone file damaged (quadctl phone fault PHONE KIND): kept as it
    was as FILE.before-KIND-MS, and a new one begun, signed in again."""
    world.commit()
    world.phone.close()
    path = os.path.join(world.home, "phones", "phone-001.db")
    os.rename(path, path + ".before-%s-1765000000000" % kind)
    world.phone = sqlite3.connect(path)
    world.phone.executescript(PHONE_SCHEMA)
    world.phone.execute("INSERT INTO session VALUES (1, 'u1')")


def test_a_damaged_phone_file_kept_as_it_was_before_counts_like_a_rollback(world):
    """A phone whose file was damaged (deploy/chaos's disk fault: quadctl
    phone fault PHONE corrupt) starts a new one, signed in again; the file as
    it was before the damage is kept as FILE.before-corrupt-MS. Everything
    it held is in the history; what it had not sent is the device's loss."""
    lost_after_the_snapshot(world)
    start_over_after_damage(world, "corrupt")
    world.act("favorites.add", "f12")
    rc, out, verdict = world.check()
    assert rc == 0, out
    assert verdict["counts"]["forgotten"] == 1 and verdict["counts"]["device_lost"] == 1, verdict["counts"]
    assert verdict["counts"]["device_lost_events"] == 1 and verdict["telemetry"]["unmade"] == 0
    assert verdict["counts"]["attempted"] == 9, verdict["counts"]  # six before, f9, f10 and f12 after


def test_a_return_made_before_a_phones_file_was_damaged_is_found_in_the_file_kept(world):
    """A return done before the damage: orders keeps no idempotency record
    for it, so its rental comes from the file kept as it was (its history)."""
    rent_and_return(world)
    start_over_after_damage(world, "garbage")
    rc, out, verdict = world.check()
    assert rc == 0, out
    assert verdict["counts"]["lost"] == 0
