"""deploy/checker.py on stores made here: a consistent history passes, and
each kind of violation (an acknowledged action lost, an effect applied twice,
a cart unit added twice or lost, actions applied out of order, stock oversold,
a spot held twice, a check-in after the deadline, a telemetry event left on a
phone, missing from the store, stored twice or stored with no phone behind
it, analytics behind the services, a phone keeping another user's news) makes
it fail with its count. No services run: each world's stores are copies of
the stores the services' own migrations make (quad-NAME --db FILE --migrate,
once per session), and its phone's file a copy of one quad-edge made (its
migrations, with no broker to reach), with the checker's history recorder
installed; the worlds write their rows into those real tables. A table or
column a migration renames or drops fails a world as it is built, naming it.
The history recorder (--install-history) is tried on a phone's file as
quad-edge makes it. Tests/e2e/test_chaos_faults.py makes the checker fail on
a real broken build."""

import itertools
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECKER = os.path.join(ROOT, "deploy", "checker.py")
sys.path.insert(0, os.path.join(ROOT, "deploy"))
from quaddeploy import services as services_list  # noqa: E402  (deploy/stack.json, the one description)
import checker  # noqa: E402  (its HISTORY_SQL: the recorder deploy/chaos installs in every phone's file)

SERVICES = services_list.names()
PHONE = "phone-001"


def seed_stock(pid):
    return ((int(pid.split("-")[1]) - 1) * 37 + 11) % 9


def bin_dir():
    """Where the services' executables are: QUAD_BIN_DIR (deploy/test sets
    it), else the release build (QUAD_BUILD_DIR or .build)."""
    return os.environ.get("QUAD_BIN_DIR") or os.path.join(os.environ.get("QUAD_BUILD_DIR") or os.path.join(ROOT, ".build"), "release")


def executable(name):
    exe = os.path.join(bin_dir(), name)
    assert os.access(exe, os.X_OK), "no %s: build with swift build -c release (or set QUAD_BIN_DIR)" % exe
    return exe


def migrate(service, path):
    return subprocess.run([executable("quad-" + service), "--db", path, "--migrate"], capture_output=True, text=True, timeout=60)


def alone(path):
    """`path` as one file: what a WAL held checkpointed into it, and no -wal
    or -shm left beside it, so that copying the file copies the store."""
    c = sqlite3.connect(path)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    left = [path + s for s in ("-wal", "-shm", "-journal") if os.path.exists(path + s)]
    assert not left, "%s left beside the store after it was closed" % ", ".join(left)


def make_phone(folder):
    """A phone's file as quad-edge makes it (its migrations,
    Sources/QuadPhone/PhoneStore.swift): one phone started with no broker to
    reach and stopped once it has begun its session (its first telemetry
    event is written after its file is migrated and its session log's table
    made, --record-views on). What it wrote is taken out: the events it
    queued, and the session log's table, kept aside (its SQL) for the worlds
    that have a session log. Returns (the file, the log table's SQL)."""
    phones = os.path.join(folder, "edge")
    os.makedirs(phones)
    path = os.path.join(phones, PHONE + ".db")
    edge = subprocess.Popen([executable("quad-edge"), "serve", "--phones", "1", "--dir", phones, "--control", "none",
                             "--frontend", "ipc://" + os.path.join(folder, "no-broker"), "--updates", "off", "--broker-key", "off",
                             "--metrics", "off", "--record-views", "on", "--file-locking", "shared"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    try:
        while True:
            assert edge.poll() is None, "quad-edge stopped before its phone began: %s" % edge.communicate()[1]
            if os.path.exists(path):
                try:
                    c = sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=1)
                    try:
                        if c.execute("SELECT 1 FROM telemetry LIMIT 1").fetchone():
                            break
                    finally:
                        c.close()
                except sqlite3.OperationalError:
                    pass  # not made yet
            assert time.time() < deadline, "quad-edge's phone began no session in 30 s (%s)" % path
            time.sleep(0.02)
    finally:
        # Killed: a phone's file is made to survive it (a campus day does),
        # and a stop in order would take a second or two.
        edge.kill()
        edge.communicate(timeout=30)
    c = sqlite3.connect(path)
    (shown,) = c.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'shown'").fetchone()
    c.executescript("DROP TABLE shown; DELETE FROM telemetry;")
    c.close()
    alone(path)
    return path, shown


class Made:
    """The stores as the real code makes them, once a session: each
    service's (quad-NAME --migrate) and a phone's (quad-edge)."""

    def __init__(self, folder):
        self.folder = folder
        self.stores = {s: os.path.join(folder, s + ".db") for s in SERVICES}
        runs = {s: subprocess.Popen([executable("quad-" + s), "--db", path, "--migrate"], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for s, path in self.stores.items()}
        self.phone, self.shown_sql = make_phone(folder)
        for s, run in runs.items():
            out, err = run.communicate(timeout=60)
            assert run.returncode == 0 and "is at its latest schema" in out, "quad-%s --migrate: %s" % (s, out + err)
            alone(self.stores[s])


@pytest.fixture(scope="session")
def made(tmp_path_factory):
    return Made(str(tmp_path_factory.mktemp("made")))


# Required columns a world does not care about get these (a number or text
# of their own where a unique index needs one).
FRESH = itertools.count(1)


def filler(declared, unique):
    t = (declared or "").upper()
    if "INT" in t:
        return next(FRESH) if unique else 0
    if any(x in t for x in ("REAL", "FLOA", "DOUB", "NUMERIC", "DECIMAL")):
        return 0.0
    if "BLOB" in t:
        return b""
    return "x%d" % next(FRESH) if unique else ""


class Store:
    """One file of a world (a service's store, or the phone's), a copy of
    the one the real code made: the world writes its rows into the real
    tables. Required columns the world does not name are filled (`insert`),
    and a table or column the file does not have fails naming the store,
    the table and what it has: a migration renamed or dropped something the
    worlds write, which is what the checker reads."""

    def __init__(self, name, path):
        self.name = name
        self.path = path
        self.conn = sqlite3.connect(path)

    def tables(self):
        return [t for (t,) in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]

    def columns(self, table):
        return [r[1] for r in self.conn.execute("SELECT * FROM pragma_table_info(?)", (table,))]

    def schema_error(self, error, sql):
        text = str(error)
        if not re.search(r"no such (table|column)|has no column named", text):
            return error
        named = set(re.findall(r"\b(?:INTO|UPDATE|FROM|TABLE|JOIN)\s+(\w+)", sql, re.I)) & set(self.tables())
        have = "; ".join("%s has %s" % (t, ", ".join(self.columns(t))) for t in sorted(named))
        return AssertionError(
            "%s: %s, in: %s\n%s's file, as the real code's migrations make it, has the tables %s%s.\n"
            "A migration renamed or dropped what this world writes, which is what deploy/checker.py reads: "
            "change the checker with it, then this test." % (self.name, text, " ".join(sql.split()), self.name,
                                                               ", ".join(self.tables()), ("; " + have) if have else ""))

    def execute(self, sql, params=()):
        try:
            return self.conn.execute(sql, params)
        except sqlite3.OperationalError as e:
            raise self.schema_error(e, sql) from None

    def executemany(self, sql, rows):
        try:
            return self.conn.executemany(sql, rows)
        except sqlite3.OperationalError as e:
            raise self.schema_error(e, sql) from None

    def executescript(self, sql):
        try:
            return self.conn.executescript(sql)
        except sqlite3.OperationalError as e:
            raise self.schema_error(e, sql) from None

    def insert(self, table, **values):
        """One row of `table`: `values`, and every NOT NULL column without a
        default they leave out filled (`filler`)."""
        info = list(self.conn.execute('SELECT name, type, "notnull", dflt_value FROM pragma_table_info(?)', (table,)))
        if not info:
            raise AssertionError("%s: no table %s; %s's file, as the real code's migrations make it, has %s.\n"
                                 "A migration renamed or dropped what this world writes, which is what deploy/checker.py reads: "
                                 "change the checker with it, then this test." % (self.name, table, self.name, ", ".join(self.tables())))
        unique = set()
        for index in self.conn.execute("SELECT name FROM pragma_index_list(?) WHERE \"unique\"", (table,)):
            unique |= {r[2] for r in self.conn.execute("SELECT * FROM pragma_index_info(?)", index)}
        row = dict(values)
        for name, declared, notnull, default in info:
            if name not in row and notnull and default is None:
                row[name] = filler(declared, name in unique)
        return self.execute("INSERT INTO %s (%s) VALUES (%s)" % (table, ", ".join(row), ", ".join("?" * len(row))), tuple(row.values()))

    def commit(self):
        self.conn.commit()

    def close(self):
        self.conn.close()


class World:
    """A consistent history: one phone that held a spot, checked in, added
    p-0002 to its cart and bought it from the cart (seed stock 3), favorited
    a product, and recorded one telemetry event; analytics caught up."""

    def __init__(self, home, made):
        self.home = home
        self.made = made
        os.makedirs(os.path.join(home, "db"))
        os.makedirs(os.path.join(home, "phones"))
        self.db = {}
        for s in SERVICES:
            path = os.path.join(home, "db", s + ".db")
            shutil.copy(made.stores[s], path)
            self.db[s] = Store(s, path)
        # Analytics follows the services (World.check brings it up to date)
        # unless a test holds it back.
        self.analytics_follows = True
        self.phone = self.new_phone(os.path.join(home, "phones", PHONE + ".db"))
        cat = self.db["catalog"]
        for n in range(1, 6):
            pid = "p-%04d" % n
            cat.insert("products", id=pid, stock=seed_stock(pid))
        self.t = 1_000_000
        # The history.
        self.act("reservations.hold", "h1")
        self.db["reservations"].insert("reservations", id="h1", user_id="u1", spot="S1", status="checked_out", held_ms=self.t - 10,
                                       deadline_ms=self.t + 600_000, checked_in_ms=self.t + 50, ended_ms=self.t + 100)
        self.event("reservations", "reservations.held", {"reservation": "h1"})
        self.act("reservations.checkin", "c1")
        self.event("reservations", "reservations.checkedin", {"reservation": "h1"})
        self.act("orders.cart.add", "a1", body={"product": "p-0002", "quantity": 1})
        self.act("orders.place", "o1", body={"source": "cart"})
        self.order("o1", [("p-0002", 1)])
        stock_hold(self, "o1", "p-0002", 1)
        self.event("orders", "orders.placed", {"order": "o1"})
        self.event("catalog", "catalog.stock.changed", {"order": "o1", "product": "p-0002", "reason": "hold"})
        self.act("favorites.add", "f1")
        self.act("orders.place", "o2", outcome="rejected", code="conflict", reason="p-0003 is sold out")
        self.record("e1")
        self.db["telemetry"].insert("events", id="e1", phone=PHONE)
        self.commit()

    def new_phone(self, path):
        """A phone's file begun (quad-edge's), its history recorder
        installed (deploy/chaos's), signed in as u1."""
        shutil.copy(self.made.phone, path)
        phone = Store(PHONE, path)
        phone.executescript(checker.HISTORY_SQL)
        phone.execute("UPDATE session SET user_id = 'u1'")
        return phone

    def order(self, ident, items, status="confirmed", source="cart", mode="buy", updated_ms=None, **more):
        """An order as the orders service keeps it (u1's, updated now)."""
        self.db["orders"].insert("orders", id=ident, user_id="u1", status=status, source=source, mode=mode,
                                 items=json.dumps([{"product": p, "quantity": q} for p, q in items]),
                                 updated_ms=self.t if updated_ms is None else updated_ms, **more)

    def record(self, event):
        """A telemetry event the phone recorded (its history keeps it once sent)."""
        self.phone.insert("chaos_telemetry", id=event, name="view.opened", ts=self.t)

    def act(self, type, id, outcome="done", code=None, reason=None, applied=True, body=None):
        self.t += 1000
        self.phone.insert("action_log", id=id, type=type, created_ms=self.t, finished_ms=self.t + 20, outcome=outcome, code=code,
                          reason=reason, attempts=1)
        self.phone.insert("chaos_actions", id=id, type=type, body=json.dumps(body or {}), created_ms=self.t)
        if applied:
            kind = "reply" if outcome == "done" else "error"
            self.db[type.split(".")[0]].insert("idempotency", id=id, type=type, reply=json.dumps({"kind": kind}), created_ms=self.t + 10)

    def queue(self, type, id):
        """An action still in the phone's outbox."""
        self.phone.insert("outbox", id=id, type=type)

    def event(self, service, type, body):
        c = self.db[service]
        seq = c.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM outbox").fetchone()[0]
        c.insert("outbox", seq=seq, id="ev%d" % seq, type=type, ts=self.t, body=json.dumps(body))

    def analytics_caught_up(self):
        """Analytics as it is once it has read every event: the orders and
        parking holds the services have, with their status."""
        a = self.db["analytics"]
        a.execute("DELETE FROM orders")
        a.execute("DELETE FROM holds")
        for ident, user, status, updated in self.db["orders"].execute("SELECT id, user_id, status, updated_ms FROM orders").fetchall():
            a.insert("orders", id=ident, user_id=user, status=status, updated_ms=updated)
        for ident, user, status, held in self.db["reservations"].execute("SELECT id, user_id, status, held_ms FROM reservations").fetchall():
            a.insert("holds", id=ident, user_id=user, status=status, held_ms=held)

    def commit(self):
        for c in self.db.values():
            c.commit()
        self.phone.commit()

    def close(self):
        for c in list(self.db.values()) + [self.phone]:
            c.close()

    def check(self, *args):
        if self.analytics_follows:
            self.analytics_caught_up()
        self.commit()
        env = {k: v for k, v in os.environ.items() if not (k.startswith("QUAD_") and k.endswith("_DB"))}
        out = os.path.join(self.home, "check.json")
        if os.path.exists(out):
            os.remove(out)
        p = subprocess.run([sys.executable, CHECKER, "--home", self.home, "--json", out] + list(args), capture_output=True, text=True, env=env)
        verdict = json.load(open(out)) if os.path.exists(out) else None
        return p.returncode, p.stdout + p.stderr, verdict


@pytest.fixture
def world(tmp_path, made):
    w = World(str(tmp_path / "home"), made)
    yield w
    w.close()


def failed(verdict):
    return sorted(c["name"] for c in verdict["checks"] if not c["ok"])


def without_history(world):
    """The world's phone as one no harness recorded: without the history
    recorder's triggers and tables."""
    triggers = [t for (t,) in world.phone.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name IN ('outbox', 'telemetry') "
                                                  "AND (%s)" % " OR ".join("sql LIKE '%%%s%%'" % t for t in checker.HISTORY_TABLES))]
    world.phone.executescript("".join("DROP TRIGGER %s;" % t for t in triggers) + "".join("DROP TABLE %s;" % t for t in checker.HISTORY_TABLES))


def stock_hold(world, order, product, quantity):
    """The catalog's side of a confirmed order: its hold, units out of stock."""
    cat = world.db["catalog"]
    cat.insert("holds", order_id=order, status="confirmed", created_ms=world.t, expires_ms=world.t + 60_000)
    cat.insert("hold_items", order_id=order, product=product, quantity=quantity)
    cat.execute("UPDATE products SET stock = stock - ? WHERE id = ?", (quantity, product))


@pytest.mark.parametrize("service", sorted(set(SERVICES)))
def test_migrating_a_store_at_its_latest_schema_runs_none(made, tmp_path, service):
    """quad-NAME --migrate on the store it made (as an upgrade with nothing
    new runs it) applies no migration and leaves the store as it was."""
    path = str(tmp_path / (service + ".db"))
    shutil.copy(made.stores[service], path)
    again = migrate(service, path)
    assert again.returncode == 0 and " 0 of its " in again.stdout, again.stdout + again.stderr
    before, after = sqlite3.connect(made.stores[service]), sqlite3.connect(path)
    schema = "SELECT type, name, sql FROM sqlite_master ORDER BY name"
    assert before.execute(schema).fetchall() == after.execute(schema).fetchall()


def test_a_table_or_column_the_migrations_no_longer_make_fails_the_world_naming_it(world):
    # What a migration renaming a column the checker reads would do.
    cat = world.db["catalog"]
    cat.execute("ALTER TABLE products RENAME COLUMN stock TO units")
    with pytest.raises(AssertionError) as e:
        cat.insert("products", id="p-0006", stock=1)
    assert "catalog: table products has no column named stock" in str(e.value) and "products has id, " in str(e.value), e.value
    assert "units" in str(e.value) and "deploy/checker.py reads" in str(e.value)
    with pytest.raises(AssertionError) as e:
        cat.execute("UPDATE products SET stock = 0")
    assert "no such column: stock" in str(e.value) and "units" in str(e.value), e.value
    with pytest.raises(AssertionError) as e:
        world.db["orders"].insert("nosuch", id="x")
    assert "orders: no table nosuch" in str(e.value) and "cart_lines" in str(e.value), e.value


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
    world.queue("favorites.add", "f2")
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["drained"], out
    assert verdict["counts"]["indeterminate"] == 1


def test_stock_sold_beyond_the_seed_is_caught(world):
    cat = world.db["catalog"]
    cat.insert("holds", order_id="o9", status="confirmed", created_ms=1, expires_ms=2)
    cat.insert("hold_items", order_id="o9", product="p-0002", quantity=5)
    rc, out, verdict = world.check()
    assert rc == 1 and "stock" in failed(verdict), out


def test_a_spot_held_twice_at_once_is_caught(world):
    res = world.db["reservations"]
    held, deadline = res.execute("SELECT held_ms, deadline_ms FROM reservations WHERE id = 'h1'").fetchone()
    res.insert("reservations", id="h2", user_id="u2", spot="S1", status="held", held_ms=held + 30, deadline_ms=deadline)
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["spots"], out


def test_a_check_in_after_the_deadline_is_caught(world):
    world.db["reservations"].execute("UPDATE reservations SET checked_in_ms = deadline_ms + 1 WHERE id = 'h1'")
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["deadlines"], out


def test_telemetry_left_on_a_phone_is_caught(world):
    world.phone.insert("telemetry", id="e2")
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
    # The store's key (events.id PRIMARY KEY, in the one migration SQLite
    # and PostgreSQL both run; the ingest's ON CONFLICT (id) DO NOTHING
    # needs it) makes this impossible today. The checker counts the ids
    # anyway: it checks the collector's promise (each event stored once)
    # without taking the schema's word for it, so a store that lost its key
    # (a migration that rebuilds the table without it, a restore without
    # its constraints) storing a resent event again is caught. This world
    # alone drops the key: the table rebuilt from the real one's columns
    # (CREATE TABLE AS keeps the columns, not the constraints).
    world.db["telemetry"].executescript("CREATE TABLE unkeyed AS SELECT * FROM events; DROP TABLE events; "
                                        "ALTER TABLE unkeyed RENAME TO events;")
    world.db["telemetry"].insert("events", id="e1", phone=PHONE)
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["telemetry"], out
    assert verdict["telemetry"]["twice"] == 1 and "twice: event e1 stored 2 times" in out


def test_a_telemetry_event_no_phone_recorded_is_caught(world):
    world.db["telemetry"].insert("events", id="e9", phone=PHONE)
    world.db["telemetry"].execute("UPDATE events SET phone = 'phone-002' WHERE id = 'e1'")
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["telemetry"], out
    assert verdict["telemetry"]["unmade"] == 1 and verdict["telemetry"]["other_phone"] == 1
    assert "unmade: event e9" in out and "recorded by phone-001, stored under phone-002" in out


def test_analytics_that_disagrees_with_the_services_is_caught(world):
    # Analytics caught up, then behind on h1's check-out and missing o1.
    world.analytics_caught_up()
    world.analytics_follows = False
    world.db["analytics"].execute("UPDATE holds SET status = 'checked_in' WHERE id = 'h1'")
    world.db["analytics"].execute("DELETE FROM orders WHERE id = 'o1'")
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["analytics"], out
    assert "2 disagreements over 1 orders, 1 holds" in figures(verdict, "analytics"), out
    assert "holds h1: service says checked_out, analytics checked_in" in out and "orders o1: service says confirmed, analytics nothing" in out


def test_news_on_the_phone_of_another_user_is_caught(world):
    # n1 is u1's and on its phone; n2 is u2's, and on u1's phone too.
    news = world.db["notifications"]
    for ident, user in (("n1", "u1"), ("n2", "u2")):
        news.insert("notifications", id=ident, user_id=user)
        world.phone.insert("inbox", id=ident, user_id=user)
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["news"], out
    assert figures(verdict, "news") == "1 sent to the phones' users, 1 delivered, 0 not yet, 1 to another user's phone", out
    assert "phone-001 (user u1) keeps notification n2 of user u2" in out


def test_without_a_history_telemetry_is_counted_and_the_cart_not_checked(world):
    without_history(world)
    world.db["orders"].insert("cart_lines", user_id="u1", product="p-0004", quantity=2)
    rc, out, verdict = world.check()
    assert rc == 0, out
    assert "counts only (the phones kept no history)" in out and "cart ledger n/a" in out


def test_a_cart_add_applied_twice_is_a_duplicate(world):
    # What a retried orders.cart.add leaves when the service applies it again:
    # one unit more than the phones added (here, still in the cart).
    world.act("orders.cart.add", "a2", body={"product": "p-0004", "quantity": 1})
    world.db["orders"].insert("cart_lines", user_id="u1", product="p-0004", quantity=2)
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
    world.order("o3", [("p-0004", 3)])
    world.act("orders.cart.add", "a4", body={"product": "p-0001", "quantity": 1})
    world.act("orders.cart.clear", "c2")
    world.act("orders.cart.add", "a5", body={"product": "p-0003", "quantity": 1})
    for ident, cart in (("a2", {"p-0004": 2}), ("s1", {"p-0004": 3}), ("a3", {"p-0004": 3, "p-0005": 1}), ("r1", {"p-0004": 3}),
                        ("a4", {"p-0001": 1}), ("c2", {}), ("a5", {"p-0003": 1})):
        keep_reply(world, ident, cart)
    world.db["orders"].insert("cart_lines", user_id="u1", product="p-0003", quantity=1)
    stock_hold(world, "o3", "p-0004", 3)
    rc, out, verdict = world.check()
    assert rc == 0, out
    assert "cart ledger: 6 units added, 1 set, 1 removed, 1 cleared, 1 rejected; 2 orders from the cart took 4 units, " \
        "1 units left in carts; 0 applied twice, 0 missing" in out


def test_an_add_applied_again_then_overwritten_by_a_set_is_caught_by_what_the_phone_was_told(world):
    # The add's first application is the stored reply (1 unit); the retry,
    # applied again, answered the phone 2; the set on the same line hides it
    # from the store's carts: only the phone's record of its answer shows it.
    world.act("orders.cart.add", "a2", body={"product": "p-0004", "quantity": 1})
    world.act("orders.cart.set", "s1", body={"product": "p-0004", "quantity": 3})
    keep_reply(world, "a2", {"p-0004": 1})
    keep_reply(world, "s1", {"p-0004": 3})
    world.phone.execute("""UPDATE action_log SET cart = '{"p-0004": 2}' WHERE id = 'a2'""")
    world.phone.execute("""UPDATE action_log SET cart = '{"p-0004": 3}' WHERE id = 's1'""")
    world.db["orders"].insert("cart_lines", user_id="u1", product="p-0004", quantity=3)
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["duplicated"], out
    assert verdict["counts"]["duplicated"] == 1
    assert "the reply phone-001 was told for orders.cart.add a2 has 2 of p-0004, the replay 1 (1 applied twice)" in out


def test_a_removal_the_store_did_not_apply_is_lost(world):
    # The phone saw the removal done; the store still holds the line.
    world.act("orders.cart.add", "a2", body={"product": "p-0004", "quantity": 2})
    world.act("orders.cart.remove", "r1", body={"product": "p-0004"})
    world.db["orders"].insert("cart_lines", user_id="u1", product="p-0004", quantity=2)
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["duplicated"], out
    assert "the cart in the orders store has 2 of p-0004, the replay 0" in out


def test_an_order_from_the_cart_that_took_other_lines_is_caught(world):
    # The cart held 2 of p-0004 when o3 was placed; the order took 1 of p-0005.
    world.act("orders.cart.add", "a2", body={"product": "p-0004", "quantity": 2})
    world.act("orders.place", "o3", body={"source": "cart"})
    world.order("o3", [("p-0005", 1)])
    stock_hold(world, "o3", "p-0005", 1)
    world.db["orders"].insert("cart_lines", user_id="u1", product="p-0004", quantity=2)
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
    world.db["orders"].insert("cart_lines", user_id="u1", product="p-0004", quantity=1)
    rc, out, verdict = world.check()
    assert failed(verdict) == ["drained"], out
    assert "0 applied twice, 0 missing" in out


def test_the_history_recorder_keeps_what_a_phone_deletes(tmp_path, made):
    # A phone's file as quad-edge makes it, in WAL (as a harness may leave it).
    folder = tmp_path / "phones"
    folder.mkdir()
    shutil.copy(made.phone, str(folder / (PHONE + ".db")))
    db = Store(PHONE, str(folder / (PHONE + ".db")))
    db.execute("PRAGMA journal_mode=WAL")
    db.insert("outbox", id="a1", type="orders.cart.add", body='{"product": "p-0001"}', created_ms=1)
    db.insert("telemetry", id="e1", name="view.opened", ts=1)
    db.commit()
    p = subprocess.run([sys.executable, CHECKER, "--phones", str(folder), "--install-history", "1", "--wait", "10"],
                       capture_output=True, text=True)
    assert p.returncode == 0 and "installed in 1 phone files" in p.stdout, p.stdout + p.stderr
    # The phone goes on: sends, deletes, writes more.
    db.executescript("DELETE FROM outbox; DELETE FROM telemetry;")
    db.insert("outbox", id="a2", type="favorites.add", body='{"product": "p-0002"}', created_ms=2)
    db.insert("telemetry", id="e2", name="search.performed", ts=2)
    db.execute("DELETE FROM telemetry WHERE id = 'e2'")
    db.commit()
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
    log = os.path.join(world.home, "faults.log")
    with open(log, "w") as f:
        f.write("".join(l + "\n" for l in lines))
    args = ["--faults", log, "--t0", "1000000"]
    if tolerance is not None:
        args += ["--skew-tolerance", str(tolerance)]
    return world.check(*args)


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
    world.db["reservations"].insert("reservations", id="h2", user_id="u2", spot="S2", status="expired", held_ms=world.t,
                                    deadline_ms=world.t + 600_000, ended_ms=world.t + 400_000)
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
    world.db["reservations"].insert("reservations", id="h2", user_id="u2", spot="S2", status="held", held_ms=1000, deadline_ms=2000)
    rc, out, verdict = world.check()
    assert rc == 1 and failed(verdict) == ["holds"], out
    assert "0 early, 1 late" in figures(verdict, "holds"), out


def test_a_check_in_late_in_real_time_is_caught_though_stamped_in_time(world):
    # A 60 s hold; the phone checked in 200 s after it was held, and a worker
    # whose clock ran 150 s slow stamped the check-in before the deadline.
    world.act("reservations.hold", "h3")
    held = world.t
    world.db["reservations"].insert("reservations", id="h3", user_id="u1", spot="S3", status="checked_in", held_ms=held,
                                    deadline_ms=held + 60_000, checked_in_ms=held + 50_000)
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
    res.insert("reservations", id=b, user_id="u5", spot="S8", status="cancelled", held_ms=1096000, deadline_ms=1141000, ended_ms=1012000)
    res.insert("reservations", id=a, user_id="u6", spot="S8", status="checked_in", held_ms=1060000, deadline_ms=1105000, checked_in_ms=1061000)
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
    res.insert("reservations", id=b, user_id="u3", spot="S9", status="expired", held_ms=1070000, deadline_ms=1115000, ended_ms=1115100)
    res.insert("reservations", id=a, user_id="u4", spot="S9", status="held", held_ms=1019040, deadline_ms=99999999999)
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
    world.act("orders.place", order, body={"source": "buy_now", "product": product, "mode": "rent"})
    world.order(order, [(product, 1)], status="returned" if returned else "confirmed", source="buy_now", mode="rent")
    cat.insert("holds", order_id=order, status="released" if returned else "confirmed", created_ms=world.t, expires_ms=world.t + 60_000,
               mode="rent")
    cat.insert("hold_items", order_id=order, product=product, quantity=1)
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
    cat.insert("listings", id=lid, quantity=quantity, unlisted=unlisted)
    cat.insert("products", id=lid, stock=stock)


def test_a_listing_balances_against_its_own_quantity(world):
    # 3 on offer, 1 sold (a confirmed hold), 2 in stock; 1 more was withdrawn earlier.
    listed(world, "l-0190f4c2", 3, 1, 2)
    cat = world.db["catalog"]
    cat.insert("holds", order_id="o-l1", status="confirmed", created_ms=world.t, expires_ms=world.t + 60_000)
    cat.insert("hold_items", order_id="o-l1", product="l-0190f4c2", quantity=1)
    rc, out, verdict = world.check()
    assert rc == 0, out
    assert verdict["stock_units"]["listings"] == 1 and verdict["stock_units"]["listed_units"] == 4
    assert "1 listings of 4 units ever listed" in stock_figures(verdict)


def test_a_listing_sold_twice_is_caught(world):
    # Quantity 1, and two confirmed holds of it: one unit sold twice.
    listed(world, "l-0190f4c3", 1, 0, 0)
    cat = world.db["catalog"]
    for order in ("o-a", "o-b"):
        cat.insert("holds", order_id=order, status="confirmed", created_ms=world.t, expires_ms=world.t + 60_000)
        cat.insert("hold_items", order_id=order, product="l-0190f4c3", quantity=1)
    rc, out, verdict = world.check()
    assert rc == 1 and "stock" in failed(verdict), out
    assert "listing l-0190f4c3: quantity 1, now 0 in stock, held or sold 2" in out


def test_a_listing_product_without_its_listing_row_is_caught(world):
    world.db["catalog"].insert("products", id="l-0190f4c4", stock=3)
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
    world.phone.insert("returns", rental="r1", action="r1-back", status="returned")
    without_history(world)
    rc, out, verdict = world.check()
    assert rc == 0, out


# The session guarantees (issue 30): a phone's session log (the `shown`
# table, quad-edge --record-views on) and its saved copies, against the
# orders' and products' versions in the stores.


def with_sessions(world):
    """The world's phone with a consistent session log: it viewed p-0002 at
    versions 3 then 5, placed order o1 (acknowledged at version 7), saw it
    listed, returned rental o9 read at version 4 (answered at 6), and keeps
    o1, o9 and p-0002 at the stores' versions. The log's table is the one
    quad-edge makes with --record-views on (SessionLog.swift)."""
    world.phone.executescript(world.made.shown_sql)
    world.order("o9", [], status="returned", source="buy_now", mode="rent", updated_ms=1, version=6)
    world.db["orders"].execute("UPDATE orders SET version = 7 WHERE id = 'o1'")
    world.db["catalog"].execute("UPDATE products SET version = 5 WHERE id = 'p-0002'")
    world.db["catalog"].insert("holds", order_id="o9", status="released", created_ms=1, expires_ms=2, mode="rent")
    rows = [(10, "view", "product", "product:p-0002", 3, None), (11, "view", "home", "product:p-0002", 5, None),
            (12, "act", "orders.place", "product:p-0002", 5, "o1"), (13, "ack", "orders.place", "order:o1", 7, "o1"),
            (14, "view", "orders", "order:o1", 7, None), (14, "view", "orders", "view:orders", 0, None),
            (15, "view", "rentals", "order:o9", 4, None), (16, "act", "orders.return", "order:o9", 4, "r1"),
            (17, "ack", "orders.return", "order:o9", 6, "r1"), (18, "view", "orders", "order:o1", 7, None),
            (18, "view", "orders", "view:orders", 0, None), (18, "view", "orders", "order:o9", 6, None)]
    world.phone.executemany("INSERT INTO shown (at_ms, kind, view, object, version, action) VALUES (?, ?, ?, ?, ?, ?)", rows)
    world.phone.insert("orders", id="o1", version=7)
    world.phone.insert("orders", id="o9", version=6)
    world.phone.insert("saved", key='catalog.product.get {"id":"p-0002"}', body=json.dumps({"id": "p-0002", "version": 5}))
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
    path = os.path.join(world.home, "phones", PHONE + ".db")
    snapshot = sqlite3.connect(path + ".snapshot")
    world.phone.conn.backup(snapshot)
    snapshot.close()
    after(world)
    world.commit()
    world.phone.close()
    os.rename(path, path + ".rolledback-1765000000000")
    os.rename(path + ".snapshot", path)
    world.phone = Store(PHONE, path)


def lost_after_the_snapshot(world):
    # Sent and applied, its answer seen: the services have it.
    world.act("favorites.add", "f9")
    # Queued, never answered, never applied: the device's loss.
    world.act("favorites.add", "f10", outcome="pending", applied=False)
    world.queue("favorites.add", "f10")
    # One event sent and stored, one still queued when the file lost it.
    world.record("e5")
    world.db["telemetry"].insert("events", id="e5", phone=PHONE)
    world.record("e6")
    world.phone.insert("telemetry", id="e6")


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
    t.execute("UPDATE events SET session = 's1', name = 'view.opened', ts = 5, offline = 0, props = '{\"view\":\"home\"}'")
    payload = {"id": "e5", "phone": PHONE, "session": "s1", "name": "view.opened", "ts": 5, "offline": False,
               "queued_ms": 900, "props": props_sent}
    t.insert("event_conflicts", id="e5", digest="d2", payload=json.dumps(payload), first_ms=1, last_ms=1, times=1)
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
    path = os.path.join(world.home, "phones", PHONE + ".db")
    os.rename(path, path + ".before-%s-1765000000000" % kind)
    world.phone = world.new_phone(path)


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
