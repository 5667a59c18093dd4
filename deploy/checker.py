#!/usr/bin/env python3
"""deploy/checker.py: the final read and the checks of a chaos run.

Reads every phone's SQLite file (its action log and outbox: what the user
did, in order, and what the phone was told) and every service's store
(SQLite files or PostgreSQL databases, as the stack in QUAD_HOME records
them), and checks, in Jepsen's terms:

  drained      every phone's outbox is empty (nothing indeterminate left)
  lost         every action a phone saw acknowledged (done) is applied in its
               service's store (an idempotency record with a success reply);
               every rejected action has a reason and no success in the store
  duplicated   no effect of an action appears twice (an order, a stock hold,
               a reservation, or an event about one of them, twice; the cart
               ledger: each phone's cart actions (add, set, remove, clear)
               and orders from the cart replayed in order, a unit in a cart,
               in a cart action's stored or answered reply, or bought from a
               cart, beyond what the replay puts there; units short of it
               count as lost)
  order        each phone's actions were applied in the order it made them
               (the services' application times follow the outbox order; an
               action in flight while its service had a worker on a skewed
               clock is not compared, and counted as such)
  stock        no product sold beyond its stock (stock >= 0, and seed stock =
               stock now + units held, sold or rented out: every unit sold,
               rented out, returned to stock or in stock, none twice); a
               returned rental's units came back exactly once (one
               catalog.stock.changed release per product of its order in the
               catalog's outbox), and no release for an order not returned,
               cancelled or rejected; listings (l-...) have no seed stock and
               are skipped, counted in the message
  saga         every confirmed order has a confirmed stock hold, every
               returned one a released hold (never still confirmed), and
               every rejected or cancelled one none
  spots        no spot held twice at once (reservation intervals per spot do
               not overlap; by more than the skew tolerance when a skewed
               reservations worker may have stamped one of the two)
  deadlines    no hold fulfilled after its deadline (parking check-in before
               the deadline; catalog holds confirmed before they expired, to
               within the skew tolerance)
  analytics    analytics agrees with the services' stores: the same orders and
               parking holds with the same status (--settle waits for it)
  brokers      no request acknowledged by a broker that died is lost: every
               action a phone saw answered in the 5 s before a broker's
               SIGKILL, or in flight across it, is applied in its store
               (counts per death; n/a when no broker died)
  holds        no parking hold fulfilled or expired early or late by more than
               the skew tolerance (--skew-tolerance, the largest clock offset
               of the run plus 5 s): an expiry stamped within the tolerance of
               its deadline, no hold left held past it, no check-in before
               its hold, and, in real time (the phones' clocks), no check-in
               done later than the deadline plus the tolerance and none
               refused as expired earlier than the deadline minus it
  telemetry    event by event: every telemetry event a phone recorded is stored
               in quad-telemetry's store exactly once (none missing, none twice,
               none stored that no phone recorded, each under the phone that
               recorded it), none left on a phone, no id with two payloads
  monotonic    session guarantees, from each phone's session log (quad-edge
  ryw          --record-views on, which deploy/chaos run sets): no view goes
  wfr          back to an older version of an object; once an action is
  converged    acknowledged no view shows what it made older, and every
               orders view lists every order acknowledged before it; an
               action on an object is answered at a version newer than the
               one the phone held when it made it; after the final read each
               phone's saved orders and products are at the services'
               versions (n/a without the log)
  alerts       only with --alerts (deploy/chaos run --prometheus): every fault
               that a metric sees raised its alert within the stated time,
               every alert resolved after its fault healed, none fired with
               no fault in force (deploy/quaddeploy/alerts.py: the table)

The phones' history: a phone deletes an action from its outbox and an event
from its telemetry queue once answered, so `deploy/chaos run` records what
every phone made (--install-history, before any phone can reach the broker):
triggers in each phone's file copy every action into chaos_actions (id, type,
body) and every event into chaos_telemetry (id, name, ts) as they are
written. Without that history (phones run some other way) the telemetry check
falls back to counts and the cart ledger is skipped.

Prints a verdict table and writes the same as JSON (--json); exits 1 when a
check fails, 2 when the stores cannot be read. Python 3 and psql only.

  deploy/checker.py --phones DIR --install-history N [--wait S]
installs the history recorder in the N phone files of DIR (waiting up to S
seconds, default 120, for them to be created) and exits 0, or 1 on a timeout.
"""

import argparse
import glob
import json
import os
import shlex
import sqlite3
import subprocess
import sys
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quaddeploy import services as services_list  # noqa: E402  (deploy/stack.json, the one description)
from quaddeploy import cli  # noqa: E402

SERVICES = services_list.names()

# The phones' history, kept by triggers in each phone's file (install_history).
HISTORY_TABLES = {"chaos_actions", "chaos_telemetry"}
HISTORY_SQL = """
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS chaos_actions (id TEXT PRIMARY KEY, type TEXT NOT NULL, body TEXT NOT NULL, created_ms BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS chaos_telemetry (id TEXT PRIMARY KEY, name TEXT NOT NULL, ts BIGINT NOT NULL);
CREATE TRIGGER IF NOT EXISTS chaos_action_made AFTER INSERT ON outbox BEGIN
    INSERT OR IGNORE INTO chaos_actions (id, type, body, created_ms) VALUES (NEW.id, NEW.type, NEW.body, NEW.created_ms);
END;
CREATE TRIGGER IF NOT EXISTS chaos_event_recorded AFTER INSERT ON telemetry BEGIN
    INSERT OR IGNORE INTO chaos_telemetry (id, name, ts) VALUES (NEW.id, NEW.name, NEW.ts);
END;
INSERT OR IGNORE INTO chaos_actions (id, type, body, created_ms) SELECT id, type, body, created_ms FROM outbox;
INSERT OR IGNORE INTO chaos_telemetry (id, name, ts) SELECT id, name, ts FROM telemetry;
COMMIT;
"""


def install_history(folder, count, wait_s):
    """Installs the history recorder in each of `count` phone files in
    `folder` once quad-edge has created them (their outbox and telemetry
    tables exist). What a phone wrote before is copied in the same
    transaction; it must not have been answered yet (deploy/chaos keeps the
    phones cut off from the broker until this returns), or it is gone."""
    import time
    deadline = time.time() + wait_s
    done = set()
    while True:
        for f in sorted(glob.glob(os.path.join(folder, "*.db"))):
            if f in done:
                continue
            try:
                db = sqlite3.connect(f, timeout=30, isolation_level=None)
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if {"outbox", "telemetry"} <= tables:
                    db.executescript(HISTORY_SQL)
                    done.add(f)
                db.close()
            except sqlite3.DatabaseError as e:
                print("checker: %s: %s (trying again)" % (f, e), file=sys.stderr)
        if len(done) >= count:
            print("history recorder installed in %d phone files" % len(done))
            return 0
        if time.time() >= deadline:
            print("checker: only %d of %d phone files in %s after %g s" % (len(done), count, folder, wait_s), file=sys.stderr)
            for f in sorted(glob.glob(os.path.join(folder, "*.db"))):
                if f not in done:
                    print("checker: %s has no outbox and telemetry tables yet" % f, file=sys.stderr)
            return 1
        time.sleep(0.1)


class Store:
    """One service's store, read-only: a SQLite file or a postgres:// URL."""

    def __init__(self, service, location):
        self.service = service
        self.location = location
        self.pg = "://" in location
        self.conn = None
        if not self.pg:
            if not os.path.exists(location):
                raise FileNotFoundError(location)
            self.conn = sqlite3.connect("file:%s?mode=ro" % location, uri=True, timeout=30)
            self.conn.row_factory = sqlite3.Row

    def rows(self, sql):
        if self.pg:
            wrapped = "SELECT coalesce(json_agg(t), '[]'::json) FROM (%s) t" % sql
            out = subprocess.run(["psql", "-XAtq", "-v", "ON_ERROR_STOP=1", self.location, "-c", wrapped],
                                 capture_output=True, text=True, timeout=120)
            if out.returncode != 0:
                raise RuntimeError("psql %s: %s" % (self.location, out.stderr.strip()))
            return json.loads(out.stdout or "[]")
        return [dict(r) for r in self.conn.execute(sql)]

    def has_table(self, name):
        if self.pg:
            return bool(self.rows("SELECT 1 AS x FROM information_schema.tables WHERE table_name = '%s'" % name))
        return bool(self.rows("SELECT 1 AS x FROM sqlite_master WHERE type = 'table' AND name = '%s'" % name))


def read_env_file(path):
    """KEY=value lines as bash's printf %q wrote them."""
    env = {}
    if not os.path.exists(path):
        return env
    for line in open(path):
        line = line.strip()
        if line.startswith("export "):
            line = line[len("export "):]
        if "=" not in line:
            continue
        key, value = line.split("=", 1)
        try:
            parts = shlex.split(value)
            env[key] = parts[0] if parts else ""
        except ValueError:
            env[key] = value
    return env


def store_locations(home):
    env = {}
    env.update(read_env_file(os.path.join(home, "run", "hosts.env")))
    out = {}
    for s in SERVICES:
        var = "QUAD_%s_DB" % s.upper()
        loc = os.environ.get(var) or env.get(var) or os.path.join(home, "db", s + ".db")
        out[s] = loc
    return out


def seed_stock(product_id):
    """The catalog's seed stock of p-NNNN (Sources/QuadCatalog/Seed.swift)."""
    try:
        n = int(product_id.split("-", 1)[1]) - 1
    except (IndexError, ValueError):
        return None
    return (n * 37 + 11) % 9


class Checker:
    def __init__(self, args):
        self.args = args
        self.results = []  # (name, ok, figure, detail)
        self.examples = defaultdict(list)
        self.counts = Counter()

    def check(self, name, ok, figure, detail=""):
        self.results.append((name, ok, figure, detail))

    def example(self, name, text):
        if len(self.examples[name]) < 5:
            self.examples[name].append(text)

    # ------------------------------------------------------------ phones

    def read_phones(self):
        files = sorted(glob.glob(os.path.join(self.args.phones, "*.db")))
        phones = {}
        for f in files:
            name = os.path.basename(f)[:-3]
            phone = read_phone_file(f)
            # A file the disk fault rolled back (quadctl phone fault PHONE
            # rollback) lost what it wrote after its snapshot; the file it
            # replaced is kept as FILE.rolledback-MS, in the order they were.
            # A damaged one (corrupt, truncate, garbage) was kept as it was
            # before the damage as FILE.before-KIND-MS.
            replaced = sorted((g for g in glob.glob(glob.escape(f) + ".rolledback-*") + glob.glob(glob.escape(f) + ".before-*-*")
                               if g.rsplit("-", 1)[-1].isdigit()),
                              key=lambda g: int(g.rsplit("-", 1)[-1]))
            if replaced:
                phone = merge_rolled_back([read_phone_file(g, history_only=True) for g in replaced], phone)
            phones[name] = phone
        return phones

    # ------------------------------------------------------------ run

    def run(self):
        locations = store_locations(self.args.home)
        stores = {}
        for s, loc in locations.items():
            try:
                stores[s] = Store(s, loc)
            except FileNotFoundError:
                pass
        phones = self.read_phones()
        if not phones:
            raise RuntimeError("no phone files (*.db) in %s" % self.args.phones)

        # The services' records of every request id they applied.
        applied = {}  # id -> (service, ok, created_ms)
        for s, st in stores.items():
            if not st.has_table("idempotency"):
                continue
            for r in st.rows("SELECT id, type, reply, created_ms FROM idempotency"):
                ok = True
                try:
                    ok = json.loads(r["reply"]).get("kind") != "error"
                except (ValueError, AttributeError):
                    pass
                applied[r["id"]] = (s, ok, int(r["created_ms"]))

        self.applied = applied
        self.events = fault_events(self.args.faults, self.args.t0)
        skewed = self.events["clock"]  # service -> [(start ms, end ms)]

        def under_skew(service, a):
            lo, hi = int(a["created_ms"]), int(a["finished_ms"] or a["created_ms"])
            return any(s0 <= hi and lo <= s1 for s0, s1 in skewed.get(service, []))

        # orders.return is idempotent by order, not by envelope id: orders
        # keeps no idempotency record for it. A return is applied when its
        # rental is returned in the orders store (stamped when it was).
        returned = {}
        if "orders" in stores and stores["orders"].has_table("orders"):
            returned = {r["id"]: int(r["updated_ms"]) for r in stores["orders"].rows("SELECT id, updated_ms FROM orders WHERE status = 'returned'")}
        for p in phones.values():
            for a in p["actions"]:
                rental = p["returns"].get(a["id"])
                if a["type"] == "orders.return" and a["outcome"] == "done" and a["id"] not in applied and rental in returned:
                    applied[a["id"]] = ("orders", True, returned[rental])

        total = Counter()
        lost, wrong, noreason, pending, order_bad, order_skipped = 0, 0, 0, 0, 0, 0
        for name, p in phones.items():
            last_applied = None
            for a in p["actions"]:
                total["attempted"] += 1
                outcome = a["outcome"]
                rec = applied.get(a["id"])
                service = a["type"].split(".", 1)[0]
                if a.get("forgotten") and outcome == "pending":
                    # Made, then lost with the phone's file before any
                    # answer: the device's loss. The services may have
                    # applied it (its answer was lost with the file).
                    total["forgotten"] += 1
                    if rec is None:
                        total["device_lost"] += 1
                        self.example("lost", "(the device's) %s %s %s: lost with the phone's rolled-back file, never answered, not applied" % (
                            name, a["type"], a["id"]))
                    continue
                if outcome == "pending":
                    pending += 1
                    total["indeterminate"] += 1
                    self.example("drained", "%s %s %s still pending" % (name, a["type"], a["id"]))
                    continue
                if outcome == "done":
                    total["acknowledged"] += 1
                    total["ok"] += 1
                    if rec is None:
                        lost += 1
                        self.example("lost", "%s %s %s: done on the phone, no record in %s" % (name, a["type"], a["id"], service))
                    elif not rec[1]:
                        wrong += 1
                        self.example("lost", "%s %s %s: done on the phone, refused in %s's store" % (name, a["type"], a["id"], service))
                else:
                    total["failed"] += 1
                    if a["code"] != "dropped":
                        total["acknowledged"] += 1
                    if not (a["reason"] or "").strip():
                        noreason += 1
                        self.example("lost", "%s %s %s: rejected without a reason" % (name, a["type"], a["id"]))
                    if rec is not None and rec[1]:
                        wrong += 1
                        self.example("lost", "%s %s %s: rejected on the phone (%s) but applied in %s" % (name, a["type"], a["id"], a["code"], service))
                if rec is not None and skewed and under_skew(rec[0], a):
                    # Stamped by a worker whose clock the nemesis moved: its
                    # time says nothing about the order; the next one
                    # compares with the last one stamped on a real clock.
                    order_skipped += 1
                    continue
                if rec is not None:
                    if last_applied is not None and rec[2] < last_applied[0]:
                        order_bad += 1
                        self.example("order", "%s: %s %s applied at %d, before %s applied at %d" % (
                            name, a["type"], a["id"], rec[2], last_applied[1], last_applied[0]))
                    last_applied = (max(rec[2], last_applied[0]) if last_applied else rec[2], a["id"])
        outboxes = sum(p["outbox"] for p in phones.values())
        total["lost"] = lost + wrong
        total["out_of_order"] = order_bad
        self.counts = total
        self.phones_read = phones
        self.check("drained", outboxes == 0 and pending == 0, "%d in outboxes, %d pending" % (outboxes, pending))
        lost_at = len(self.results)
        self.check("order", order_bad == 0, "%d out of order%s" % (
            order_bad, ", %d applied by a worker on a skewed clock not compared" % order_skipped if skewed else ""))

        dup = self.check_duplicates(stores)
        total["duplicated"] = dup
        missing = self.cart_missing
        total["lost"] += missing
        forgotten_events = sum(len(p.get("forgotten_events") or ()) for p in phones.values())
        device = ""
        if total["forgotten"] or forgotten_events:
            device = ("; the devices' own: %d actions lost with rolled-back phone files before any answer (%d of them applied "
                      "anyway), %d telemetry events lost queued (not the system's)") % (
                          total["forgotten"], total["forgotten"] - total["device_lost"], self.device_events(stores, phones))
        self.results.insert(lost_at, ("lost", lost + wrong + noreason + missing == 0,
                                      "%d lost, %d answered differently, %d without a reason, %d cart units missing%s" % (
                                          lost, wrong, noreason, missing, device), ""))
        self.check_stock(stores)
        self.check_saga(stores)
        self.check_spots(stores)
        self.check_telemetry(stores, phones)
        self.check_news(stores, phones)
        self.check_analytics(stores)
        self.check_brokers(phones, applied)
        self.check_holds(stores, phones)
        self.check_sessions(stores, phones)
        self.phones = phones
        waits = sorted(int(a["finished_ms"]) - int(a["created_ms"]) for p in phones.values() for a in p["actions"]
                       if a["finished_ms"] is not None and a["code"] != "dropped")
        def pct(q):
            return waits[min(len(waits) - 1, int(len(waits) * q))] if waits else None
        self.latency = {"count": len(waits), "p50_ms": pct(0.5), "p95_ms": pct(0.95), "p99_ms": pct(0.99),
                        "max_ms": waits[-1] if waits else None}

    def check_duplicates(self, stores):
        dup = 0
        keys = Counter()
        if "orders" in stores and stores["orders"].has_table("orders"):
            pass  # orders.id is the action id and the key: two rows cannot exist
        # Events about one order or reservation, of one type, published twice.
        for s in ("orders", "reservations", "catalog"):
            st = stores.get(s)
            if st is None or not st.has_table("outbox"):
                continue
            for r in st.rows("SELECT * FROM outbox"):
                # Rows keep the event's encoded envelope (the body column
                # is empty then); older rows keep only the body.
                try:
                    envelope = r["envelope"] if "envelope" in r.keys() else None
                    body = json.loads(envelope)["body"] if envelope else json.loads(r["body"])
                except (ValueError, KeyError, TypeError):
                    continue
                if not isinstance(body, dict):
                    continue
                for key in ("order", "reservation"):
                    ident = body.get(key)
                    if isinstance(ident, dict):
                        ident = ident.get("id")
                    if isinstance(ident, str):
                        # One event of a type per entity (per product and
                        # reason for stock changes); a second is a second effect.
                        keys[(s, r["type"], ident, str(body.get("product", "")), str(body.get("reason", "")))] += 1
        events_twice = 0
        for (s, t, ident, product, reason), n in keys.items():
            if n > 1:
                events_twice += n - 1
                self.example("duplicated", "%s published %s about %s%s %d times" % (s, t, ident, " " + product if product else "", n))
        dup += events_twice
        extra, missing, ledger = self.cart_ledger(stores)
        dup += extra
        self.cart_missing = missing
        self.check("duplicated", dup == 0, "%d duplicated effects (%d events twice; %s)" % (dup, events_twice, ledger))
        return dup

    # Cart actions the ledger replays, and the order statuses that took the
    # cart's lines (bought, or rented, then maybe cancelled or returned).
    CART_TYPES = ("orders.cart.add", "orders.cart.set", "orders.cart.remove", "orders.cart.clear")
    TOOK_CART = ("confirmed", "cancelled", "returned")

    def cart_ledger(self, stores):
        """Cart units, user by user, by replay: each phone's cart actions
        (add, set, remove, clear) and its orders from the cart, in the order
        the phone made them (the one order they are sent and applied in: one
        orders action in flight per phone, the next only after the answer),
        give the cart the orders store should hold after each of them and
        the units each order from the cart should take. A rejected action
        changes nothing; one still queued counts as the store's idempotency
        record says (applied once when it has a success, else not); an
        order takes the cart when the store has it confirmed (or cancelled
        or returned after that).

        Compared with the store, the replay stepping onto what it finds:
        the cart in the reply the store keeps for each cart action's id
        (the cart just after its one application), the cart in the reply
        the phone was told for that id (the action log's `cart`: a reply
        other than the stored one is a second application), the lines of
        each order from the cart, and the cart lines left at the end. Units
        beyond the replay are effects applied twice (a retried add applied
        again); units short of it are lost. Returns (units applied twice,
        units lost, figures)."""
        st = stores.get("orders")
        phones = self.phones_read
        if st is None or not st.has_table("cart_lines") or not st.has_table("orders"):
            return 0, 0, "cart ledger n/a: no orders store"
        if any(p["made"] is None for p in phones.values()):
            return 0, 0, "cart ledger n/a: the phones kept no history"
        applied = getattr(self, "applied", {})
        stored = {}  # action id -> the cart in the reply the store keeps for it
        for r in st.rows("SELECT id, reply FROM idempotency WHERE type LIKE 'orders.cart.%'"):
            cart = reply_cart(r["reply"])
            if cart is not None:
                stored[r["id"]] = cart
        orders = {r["id"]: r for r in st.rows("SELECT id, user_id, status, items FROM orders WHERE source = 'cart'")}
        carts = defaultdict(Counter)
        for r in st.rows("SELECT user_id, product, quantity FROM cart_lines"):
            carts[r["user_id"]][r["product"]] += int(r["quantity"])

        # Each user's actions, in the order the phone made them.
        by_user = defaultdict(list)
        for name, p in phones.items():
            if not p["user"]:
                continue
            for a in p["actions"]:
                if a["type"] in self.CART_TYPES or a["type"] == "orders.place":
                    made = p["made"].get(a["id"])
                    if made is None:
                        raise RuntimeError("%s: action %s is in the action log but not in the history (chaos_actions)" % (name, a["id"]))
                    by_user[p["user"]].append((name, a, json.loads(made["body"] or "{}")))
        tally = Counter()
        self.ledger_extra = self.ledger_missing = 0

        def compare(user, expected, found, what):
            """Counts the units `found` has beyond `expected` (applied
            twice) and short of it (lost), product by product."""
            for product in sorted(set(expected) | set(found)):
                d = found.get(product, 0) - expected.get(product, 0)
                if d > 0:
                    self.ledger_extra += d
                    self.example("duplicated", "user %s: %s has %d of %s, the replay %d (%d applied twice)" % (
                        user, what, found.get(product, 0), product, expected.get(product, 0), d))
                elif d < 0:
                    self.ledger_missing -= d
                    self.example("lost", "user %s: %s has %d of %s, the replay %d (%d missing)" % (
                        user, what, found.get(product, 0), product, expected.get(product, 0), -d))

        placed = set()
        for user, steps in by_user.items():
            # One phone's actions in its action log's order (its outbox's);
            # a user's several phones by the time each action was made.
            if len({name for name, _, _ in steps}) > 1:
                steps.sort(key=lambda s: (int(s[1]["created_ms"]), s[0], s[1]["rowid"]))
            else:
                steps.sort(key=lambda s: s[1]["rowid"])
            cart = Counter()
            for name, a, body in steps:
                ident, kind = a["id"], a["type"]
                if kind == "orders.place":
                    if body.get("source") != "cart":
                        continue
                    placed.add(ident)
                    o = orders.get(ident)
                    if o is None or o["status"] not in self.TOOK_CART:
                        continue
                    items = Counter()
                    for item in json.loads(o["items"]):
                        items[item["product"]] += int(item["quantity"])
                    compare(user, cart, items, "order %s from the cart" % ident)
                    tally["orders"] += 1
                    tally["bought"] += sum(items.values())
                    for product, q in items.items():  # what the order takes out (Cart.takeOut)
                        cart[product] -= q
                        if cart[product] <= 0:
                            del cart[product]
                    continue
                if a["outcome"] == "rejected":
                    tally["rejected"] += 1
                    continue
                if a["outcome"] != "done" and not applied.get(ident, (None, False))[1]:
                    continue  # still queued, never applied: nothing happened
                product, q = body.get("product"), int(body.get("quantity", 1) if kind != "orders.cart.set" else body.get("quantity", 0))
                if kind == "orders.cart.add":
                    cart[product] += q
                    tally["added"] += q
                elif kind == "orders.cart.set" and q > 0:
                    cart[product] = q
                    tally["set"] += 1
                elif kind in ("orders.cart.set", "orders.cart.remove"):
                    cart.pop(product, None)
                    tally["removed"] += 1
                else:
                    cart.clear()
                    tally["cleared"] += 1
                # What the store and the phone say the cart was after it.
                kept = stored.get(ident)
                if kept is not None:
                    compare(user, cart, kept, "the reply orders keeps for %s %s" % (kind, ident))
                    cart = Counter(kept)
                told = parse_cart(a.get("cart"))
                if told is not None and told != cart:
                    compare(user, cart, told, "the reply %s was told for %s %s" % (name, kind, ident))
                    cart = Counter(told)
            compare(user, cart, carts.get(user, Counter()), "the cart in the orders store")
            tally["left"] += sum(carts.get(user, Counter()).values())
        # Orders from a cart of these users that no phone placed.
        for ident, o in sorted(orders.items()):
            if o["user_id"] in by_user and ident not in placed and o["status"] in self.TOOK_CART:
                units = sum(int(item["quantity"]) for item in json.loads(o["items"]))
                self.ledger_extra += units
                self.example("duplicated", "user %s: order %s took %d units from the cart, and no phone placed it" % (o["user_id"], ident, units))
        extra, missing = self.ledger_extra, self.ledger_missing
        return extra, missing, ("cart ledger: %d units added, %d set, %d removed, %d cleared, %d rejected; %d orders from the cart "
                                "took %d units, %d units left in carts; %d applied twice, %d missing") % (
            tally["added"], tally["set"], tally["removed"], tally["cleared"], tally["rejected"], tally["orders"],
            tally["bought"], tally["left"], extra, missing)

    def catalog_events(self, st):
        """The catalog's catalog.stock.changed bodies, from its outbox (the
        event log: every stock change with its reason and order)."""
        out = []
        if not st.has_table("outbox"):
            return out
        for r in st.rows("SELECT * FROM outbox WHERE type = 'catalog.stock.changed'"):
            try:
                envelope = r["envelope"] if "envelope" in r.keys() else None
                body = json.loads(envelope)["body"] if envelope else json.loads(r["body"])
            except (ValueError, KeyError, TypeError):
                continue
            if isinstance(body, dict):
                out.append(body)
        return out

    def order_modes(self, stores):
        """order id -> (status, mode) from the orders store (mode buy when
        the store keeps none)."""
        orders = stores.get("orders")
        if orders is None or not orders.has_table("orders"):
            return {}
        try:
            rows = orders.rows("SELECT id, status, mode FROM orders")
        except Exception:
            rows = [dict(r, mode="buy") for r in orders.rows("SELECT id, status FROM orders")]
        return {r["id"]: (r["status"], r.get("mode") or "buy") for r in rows}

    def check_stock(self, stores):
        """Every unit of a seeded product is in stock, held, sold, or rented
        out, and none twice: seed stock = stock now + units of holds held or
        confirmed (sold, or rented out while not returned). A returned
        rental's units came back exactly once: one catalog.stock.changed
        release per product of its hold, and its hold released. A student's
        listing (l-...) balances against its own quantity instead of a seed
        stock: catalog's listings.quantity (units on offer, the seller's and
        admins' changes included; units of a withdrawn or taken-down listing
        move to listings.unlisted) = stock now + units held or confirmed."""
        st = stores.get("catalog")
        if st is None:
            self.check("stock", True, "n/a (no catalog store)")
            return
        products = {r["id"]: int(r["stock"]) for r in st.rows("SELECT id, stock FROM products")}
        modes = self.order_modes(stores)
        used = Counter()
        sold, rented, returned_units = 0, 0, 0
        items = {}   # order -> {product: quantity}
        holds = {}
        for r in st.rows("SELECT order_id, status FROM holds"):
            holds[r["order_id"]] = r["status"]
        for r in st.rows("SELECT order_id, product, quantity FROM hold_items"):
            items.setdefault(r["order_id"], {})[r["product"]] = int(r["quantity"])
        for order, lines in items.items():
            status = holds.get(order)
            for product, q in lines.items():
                if status in ("held", "confirmed"):
                    used[product] += q
                    if status == "confirmed":
                        if modes.get(order, ("", "buy"))[1] == "rent":
                            rented += q
                        else:
                            sold += q
        # Releases per order and product, from the event log.
        releases = Counter()
        for body in self.catalog_events(st):
            if body.get("reason") == "released" and isinstance(body.get("order"), str):
                releases[(body["order"], str(body.get("product", "")))] += 1
        bad = 0
        for order, (status, mode) in sorted(modes.items()):
            if status != "returned":
                continue
            for product, q in items.get(order, {}).items():
                n = releases[(order, product)]
                if n == 1:
                    returned_units += q
                else:
                    bad += 1
                    self.example("stock", "returned rental %s: %d units of %s came back %d times (once expected)" % (order, q, product, n))
        for (order, product), n in sorted(releases.items()):
            status = modes.get(order, ("", ""))[0]
            if status in ("confirmed", "held", "pending") and n > 0:
                bad += 1
                self.example("stock", "order %s is %s, yet %s's units were released %d times" % (order, status, product, n))
        listed = {}
        if st.has_table("listings"):
            listed = {r["id"]: (int(r["quantity"]), int(r["unlisted"])) for r in st.rows("SELECT id, quantity, unlisted FROM listings")}
        listings, listed_units = 0, 0
        for pid, stock in products.items():
            if pid.startswith("l-"):
                listings += 1
                if pid not in listed:
                    bad += 1
                    self.example("stock", "%s is a product with no row in listings" % pid)
                    continue
                quantity, unlisted = listed[pid]
                listed_units += quantity + unlisted
                if stock < 0 or quantity != stock + used[pid]:
                    bad += 1
                    self.example("stock", "listing %s: quantity %d, now %d in stock, held or sold %d" % (pid, quantity, stock, used[pid]))
                continue
            seed = seed_stock(pid)
            if stock < 0:
                bad += 1
                self.example("stock", "%s has stock %d" % (pid, stock))
            elif seed is not None and seed != stock + used[pid]:
                bad += 1
                self.example("stock", "%s: seed stock %d, now %d, held or sold %d" % (pid, seed, stock, used[pid]))
        self.stock_units = {"sold": sold, "rented_out": rented, "returned": returned_units,
                            "in_stock": sum(products.values()), "listings": listings, "listed_units": listed_units}
        self.check("stock", bad == 0, "%d products oversold or unbalanced, or returns not back exactly once, of %d "
                   "(units: %d sold, %d rented out, %d returned to stock, %d in stock; %d listings of %d units ever listed)" % (
                       bad, len(products), sold, rented, returned_units, self.stock_units["in_stock"], listings, listed_units))

    def check_saga(self, stores):
        orders, catalog = stores.get("orders"), stores.get("catalog")
        if orders is None or catalog is None or not orders.has_table("orders"):
            self.check("saga", True, "n/a")
            return
        holds = {r["order_id"]: r for r in catalog.rows("SELECT order_id, status, created_ms, expires_ms FROM holds")}
        bad, late = 0, 0
        n = 0
        for o in orders.rows("SELECT id, status, updated_ms FROM orders"):
            n += 1
            h = holds.get(o["id"])
            st = o["status"]
            if st == "confirmed":
                if h is None or h["status"] != "confirmed":
                    bad += 1
                    self.example("saga", "order %s is confirmed, its stock hold is %s" % (o["id"], h["status"] if h else "missing"))
            elif st == "returned":
                # A returned rental's hold is released: its units are back, never still confirmed.
                if h is None or h["status"] != "released":
                    bad += 1
                    self.example("saga", "order %s is returned, its stock hold is %s" % (o["id"], h["status"] if h else "missing"))
            elif st in ("rejected", "cancelled"):
                if h is not None and h["status"] in ("held", "confirmed"):
                    bad += 1
                    self.example("saga", "order %s is %s, its stock hold is still %s" % (o["id"], st, h["status"]))
            else:
                bad += 1
                self.example("saga", "order %s is still %s after the run" % (o["id"], st))
        self.check("saga", bad == 0, "%d orders disagree with their stock holds of %d" % (bad, n))

    def check_spots(self, stores):
        st = stores.get("reservations")
        if st is None or not st.has_table("reservations"):
            self.check("spots", True, "n/a")
            self.check("deadlines", True, "n/a")
            return
        rows = st.rows("SELECT id, spot, status, held_ms, deadline_ms, checked_in_ms, ended_ms FROM reservations")
        by_spot = defaultdict(list)
        late = 0
        inf = float("inf")
        tol = self.tolerance_ms() if self.args.skew_tolerance > 5 else 0
        for r in rows:
            end = r["ended_ms"]
            if r["status"] in ("held", "checked_in"):
                end = inf
            elif end is None:
                end = r["deadline_ms"] if r["status"] == "expired" else r["held_ms"]
            by_spot[r["spot"]].append((int(r["held_ms"]), end, r["id"]))
            if r["checked_in_ms"] is not None and int(r["checked_in_ms"]) > int(r["deadline_ms"]):
                late += 1
                self.example("deadlines", "reservation %s checked in at %s after its deadline %s" % (r["id"], r["checked_in_ms"], r["deadline_ms"]))
        windows = self.events["clock"].get("reservations", []) if hasattr(self, "events") else []

        def skewed(ident, start, end):
            """Whether a skewed reservations worker may have stamped this
            hold: its real start (the phone's UUIDv7 id holds the phone's
            time) to its end and a minute more meets a skew window."""
            try:
                real = int(ident.replace("-", "")[:12], 16)
            except ValueError:
                return True
            if end != inf and end < start:
                # Ended before it began: two clocks stamped it.
                return True
            last = real + (end - start if end != inf else 0) + 60000
            return any(w0 <= last and real - 5000 <= w1 for w0, w1 in windows)

        twice = 0
        for spot, spans in by_spot.items():
            spans.sort()
            for k, (s1, e1, i1) in enumerate(spans):
                for s2, e2, i2 in spans[k + 1:]:
                    # Two clocks stamp two holds: a worker whose clock the
                    # nemesis moved stamps its hold's start and end off by
                    # up to the tolerance, so a later hold can seem to start
                    # first. Overlapping beyond it is a spot held twice.
                    if tol and (skewed(i1, s1, e1) or skewed(i2, s2, e2)):
                        both = max(s1, s2) < min(e1, e2) - tol
                    else:
                        both = s2 < e1
                    if both:
                        twice += 1
                        self.example("spots", "spot %s: %s [%s, %s) overlaps %s from %s" % (spot, i1, s1, e1, i2, s2))
                    if not tol:
                        break
        # Catalog holds: confirmed after they expired.
        cat = stores.get("catalog")
        if cat is not None and stores.get("orders") is not None and stores["orders"].has_table("orders"):
            holds = {r["order_id"]: r for r in cat.rows("SELECT order_id, status, expires_ms FROM holds WHERE status = 'confirmed'")}
            for o in stores["orders"].rows("SELECT id, status, updated_ms FROM orders WHERE status = 'confirmed'"):
                h = holds.get(o["id"])
                if h is not None and int(o["updated_ms"]) > int(h["expires_ms"]) + self.tolerance_ms():
                    late += 1
                    self.example("deadlines", "order %s confirmed at %s, its stock hold expired at %s" % (o["id"], o["updated_ms"], h["expires_ms"]))
        self.check("spots", twice == 0, "%d spots held twice at once, %d reservations" % (twice, len(rows)))
        self.check("deadlines", late == 0, "%d holds fulfilled after their deadline" % late)

    def tolerance_ms(self):
        return int(self.args.skew_tolerance * 1000)

    def check_brokers(self, phones, applied):
        """Every action a phone saw answered around a broker's death (in the
        5 s before the SIGKILL, or in flight across it) is applied: the
        broker that answered may be the one that died, so a reply it sent
        for a request it lost would show here."""
        deaths = self.events["broker_kills"]
        if not deaths:
            self.check("brokers", True, "n/a (no broker died)")
            return
        before = across = lost = 0
        per = []
        for k, at in deaths:
            b = c = l = 0
            for name, p in phones.items():
                for a in p["actions"]:
                    if a["finished_ms"] is None or a["code"] == "dropped":
                        continue
                    made, done = int(a["created_ms"]), int(a["finished_ms"])
                    if at - 5000 <= done <= at:
                        b += 1
                    elif made <= at < done:
                        c += 1
                    else:
                        continue
                    rec = applied.get(a["id"])
                    if a["outcome"] == "done" and (rec is None or not rec[1]):
                        l += 1
                        self.example("brokers", "%s %s %s: done on the phone around broker %s's death, %s in the store" % (
                            name, a["type"], a["id"], k, "refused" if rec else "nothing"))
            per.append("broker %s at %+.0f s: %d answered before, %d across" % (k, (at - (self.args.t0 or 0)) / 1000.0, b, c))
            before, across, lost = before + b, across + c, lost + l
        self.check("brokers", lost == 0, "%d broker deaths: %d actions answered in the 5 s before one, %d in flight across one, %d lost (%s)" % (
            len(deaths), before, across, lost, "; ".join(per[:4]) + ("; ..." if len(per) > 4 else "")))

    def check_holds(self, stores, phones):
        """Parking holds kept their deadlines within the skew tolerance, by
        the store's own stamps and by the phones' real time."""
        st = stores.get("reservations")
        if st is None or not st.has_table("reservations"):
            self.check("holds", True, "n/a (no reservations store)")
            return
        tol = self.tolerance_ms()
        rows = {r["id"]: r for r in st.rows("SELECT id, status, held_ms, deadline_ms, checked_in_ms, ended_ms FROM reservations")}
        # The end of the day: the last moment a phone heard anything (the
        # expiry sweep runs until the final read, which comes after).
        now = max([int(a["finished_ms"]) for p in phones.values() for a in p["actions"] if a["finished_ms"] is not None] or [0])
        early = late = expired = checked = 0
        gaps = []  # expiry stamp minus deadline, ms
        for r in rows.values():
            held, deadline = int(r["held_ms"]), int(r["deadline_ms"])
            if r["status"] == "expired" and r["ended_ms"] is not None:
                expired += 1
                gap = int(r["ended_ms"]) - deadline
                gaps.append(gap)
                if gap < -tol:
                    early += 1
                    self.example("holds", "reservation %s expired at %s, %d ms before its deadline %s" % (r["id"], r["ended_ms"], -gap, deadline))
                elif gap > tol:
                    late += 1
                    self.example("holds", "reservation %s expired at %s, %d ms after its deadline %s" % (r["id"], r["ended_ms"], gap, deadline))
            if r["status"] == "held" and now > deadline + tol:
                late += 1
                self.example("holds", "reservation %s still held %d ms after its deadline %s" % (r["id"], now - deadline, deadline))
            if r["checked_in_ms"] is not None:
                checked += 1
                if int(r["checked_in_ms"]) < held - tol:
                    early += 1
                    self.example("holds", "reservation %s checked in at %s, %d ms before it was held" % (r["id"], r["checked_in_ms"], held - int(r["checked_in_ms"])))
        # Real time: the phones' clocks were never moved. A hold was made
        # between its action's created and finished times; a check-in or a
        # refusal happened between its own.
        real = 0
        for name, p in phones.items():
            made = p["made"] or {}
            hold_of = {}
            current = None
            for a in p["actions"]:
                if a["type"] == "reservations.hold":
                    hold_of[a["id"]] = a
                    current = a
                    continue
                if a["type"] != "reservations.checkin" or a["finished_ms"] is None or a["code"] == "dropped":
                    continue
                rid = None
                try:
                    rid = json.loads(made[a["id"]]["body"]).get("reservation") if a["id"] in made else None
                except (ValueError, AttributeError):
                    rid = None
                h = hold_of.get(rid) if rid else current
                r = rows.get(h["id"]) if h else None
                if h is None or r is None or h["finished_ms"] is None:
                    continue
                span = int(r["deadline_ms"]) - int(r["held_ms"])
                real += 1
                if a["outcome"] == "done" and int(a["created_ms"]) > int(h["finished_ms"]) + span + tol:
                    late += 1
                    self.example("holds", "%s checked in %s at %s (phone time), %d ms after the latest real deadline" % (
                        name, h["id"], a["created_ms"], int(a["created_ms"]) - int(h["finished_ms"]) - span))
                reason = (a["reason"] or "").lower()
                if a["outcome"] != "done" and "expired" in reason and int(a["finished_ms"]) < int(h["created_ms"]) + span - tol:
                    early += 1
                    self.example("holds", "%s: check-in of %s refused as expired at %s (phone time), %d ms before the earliest real deadline" % (
                        name, h["id"], a["finished_ms"], int(h["created_ms"]) + span - int(a["finished_ms"])))
        gap = ("expiry stamps %+d to %+d ms of their deadlines" % (min(gaps), max(gaps))) if gaps else "no expiry"
        self.check("holds", early == 0 and late == 0, "%d early, %d late beyond %g s of tolerance (%d holds, %d expired, %d checked in; %s; %d check-ins timed on the phones)" % (
            early, late, tol / 1000.0, len(rows), expired, checked, gap, real))

    def check_news(self, stores, phones):
        """Each user's news (the notifications store) against what the
        user's phones keep: none may hold another user's, and every one sent
        to a user with a phone is counted delivered or not. A notification
        made after the phone's last sync (a hold expired after the day) is
        not delivered yet, not lost: counted, not failed."""
        st = stores.get("notifications")
        if st is None or not st.has_table("notifications") or any(p["inbox"] is None for p in phones.values()):
            self.check("news", True, "n/a (no notifications store, or phones without an inbox)")
            return
        owner = {r["id"]: r["user_id"] for r in st.rows("SELECT id, user_id FROM notifications")}
        users = {p["user"] for p in phones.values() if p["user"]}
        sent = {i for i, u in owner.items() if u in users}
        delivered, foreign = set(), 0
        for name, p in phones.items():
            for n in p["inbox"]:
                if n["user_id"] != p["user"] or owner.get(n["id"], p["user"]) != p["user"]:
                    foreign += 1
                    self.example("news", "%s (user %s) keeps notification %s of user %s" % (name, p["user"], n["id"], owner.get(n["id"], n["user_id"])))
                else:
                    delivered.add(n["id"])
        waiting = len(sent - delivered)
        self.news = {"sent": len(sent), "delivered": len(sent & delivered), "not_yet": waiting, "to_another_user": foreign}
        self.check("news", foreign == 0, "%d sent to the phones' users, %d delivered, %d not yet, %d to another user's phone" % (
            len(sent), len(sent & delivered), waiting, foreign))

    def check_sessions(self, stores, phones):
        """The session guarantees, per phone, from its session log (the
        `shown` table, Sources/QuadPhone/SessionLog.swift), in the order the
        phone did things:

          monotonic  no view shows an object (a product, an order) at a
                     version older than one a view of this phone showed before
          ryw        read-your-writes: once an action is acknowledged, no later
                     view shows what it made at an older version, and every
                     orders view lists every order acknowledged before it
          wfr        writes-follow-reads: an action on an object (an order
                     returned or cancelled) is applied after the version the
                     phone held when it made it (the version its answer gives
                     is newer)
          converged  after the last heal and the day's final read, each
                     phone's saved copies (its orders, its saved product
                     views) are at the services' versions

        A phone whose file was found damaged and rebuilt (a device loss)
        starts a new log: what it showed before is in the file moved aside."""
        logged = {n: p for n, p in phones.items() if p["shown"] is not None}
        names = ("monotonic", "ryw", "wfr", "converged")
        if not logged:
            for n in names:
                self.check(n, True, "n/a (no session log: quad-edge run --record-views on)")
            self.sessions = None
            return
        reads = mono_bad = ryw_checked = ryw_bad = listed = unlisted = 0
        writes = wfr_bad = 0
        for name, p in sorted(logged.items()):
            newest = {}    # object -> (version, n, view): the newest version shown so far
            acked = {}     # object -> (version, action type): made by an acknowledged action
            acted = {}     # action id -> (object, version held when it was made)
            placed = set()  # orders acknowledged to orders.place so far
            # Each orders view lists every order acknowledged before it. The
            # rows of one view share its time, and each orders view logs a
            # row `view:orders` even when it lists nothing: its time ->
            # (the orders acknowledged before its first row, those it listed).
            listing = {}
            for r in p["shown"]:
                obj, v, kind = r["object"], int(r["version"]), r["kind"]
                if kind == "view":
                    reads += 1
                    seen = newest.get(obj)
                    if seen is not None and v < seen[0]:
                        mono_bad += 1
                        self.example("monotonic", "%s: the %s view showed %s at version %d after the %s view showed %d" % (
                            name, r["view"], obj, v, seen[2], seen[0]))
                    if seen is None or v > seen[0]:
                        newest[obj] = (v, r["n"], r["view"])
                    if r["view"] == "orders":
                        listing.setdefault(r["at_ms"], (set(placed), set()))[1].add(obj)
                    made = acked.get(obj)
                    if made is not None:
                        ryw_checked += 1
                        if v < made[0]:
                            ryw_bad += 1
                            self.example("ryw", "%s: the %s view showed %s at version %d after %s made version %d" % (
                                name, r["view"], obj, v, made[1], made[0]))
                elif kind == "act":
                    acted[r["action"]] = (obj, v)
                elif kind == "ack":
                    if r["view"] == "orders.place" and obj.startswith("order:"):
                        placed.add(obj)
                    if obj not in acked or v > acked[obj][0]:
                        acked[obj] = (v, r["view"])
                    before = acted.get(r["action"])
                    if before is not None and before[0] == obj:
                        writes += 1
                        if v <= before[1]:
                            wfr_bad += 1
                            self.example("wfr", "%s: %s %s on %s held at version %d was answered at version %d" % (
                                name, r["view"], r["action"], obj, before[1], v))
            for at, (before, objs) in listing.items():
                listed += len(before & objs)
                missing = before - objs
                unlisted += len(missing)
                for o in sorted(missing)[:1]:
                    self.example("ryw", "%s: an orders view at %d did not list %s, acknowledged before it" % (name, at, o))
        ryw_bad += unlisted
        # Convergence: the saved copies against the services' stores.
        conv_checked = conv_bad = 0
        orders = stores.get("orders")
        catalog = stores.get("catalog")
        service_orders = {r["id"]: int(r["version"]) for r in orders.rows("SELECT id, version FROM orders")} \
            if orders is not None and orders.has_table("orders") else {}
        service_products = {r["id"]: int(r["version"]) for r in catalog.rows("SELECT id, version FROM products")} \
            if catalog is not None and catalog.has_table("products") else {}
        for name, p in sorted(logged.items()):
            for kind, saved, truth in (("order", p["saved_orders"], service_orders), ("product", p["saved_products"], service_products)):
                for ident, v in (saved or {}).items():
                    if ident not in truth:
                        continue
                    conv_checked += 1
                    if v != truth[ident]:
                        conv_bad += 1
                        self.example("converged", "%s keeps %s %s at version %d; the service has %d" % (name, kind, ident, v, truth[ident]))
        self.sessions = {"phones": len(logged), "reads": reads, "monotonic_violations": mono_bad,
                         "ryw_reads": ryw_checked, "orders_listed": listed, "ryw_violations": ryw_bad,
                         "writes": writes, "wfr_violations": wfr_bad, "converged_copies": conv_checked, "not_converged": conv_bad}
        self.check("monotonic", mono_bad == 0, "%d reads on %d phones, %d went back to an older version" % (reads, len(logged), mono_bad))
        self.check("ryw", ryw_bad == 0, "%d reads of objects the phone's acknowledged actions made, %d older; %d acknowledged orders listed, %d missing" % (
            ryw_checked, ryw_bad - unlisted, listed, unlisted))
        self.check("wfr", wfr_bad == 0, "%d writes on objects the phone had read, %d answered at a version not newer than the one read" % (writes, wfr_bad))
        self.check("converged", conv_bad == 0, "%d saved copies after the final read, %d not at the service's version" % (conv_checked, conv_bad))

    def device_events(self, stores, phones):
        """Telemetry events a phone lost with its rolled-back file while they
        were still queued, and the collector does not have: the device's
        loss (counted in counts.device_lost_events)."""
        forgotten = set()
        for p in phones.values():
            forgotten |= p.get("forgotten_events") or set()
        st = stores.get("telemetry")
        if not forgotten or st is None or not st.has_table("events"):
            self.counts["device_lost_events"] = len(forgotten)
            return len(forgotten)
        stored = {r["id"] for r in st.rows("SELECT id FROM events")}
        lost = len(forgotten - stored)
        self.counts["device_lost_events"] = lost
        return lost

    @staticmethod
    def resent_after_rollback(st, phones, recorder):
        """Conflicting deliveries (event_conflicts) of events recorded by a
        phone whose file was rolled back, equal to the stored event in all
        but queued_ms."""
        rolled = {n for n, p in phones.items() if p.get("rolled_back")}
        if not rolled or not st.has_table("event_conflicts"):
            return 0
        stored = {r["id"]: r for r in st.rows("SELECT id, phone, session, name, ts, offline, props FROM events")}
        n = 0
        for r in st.rows("SELECT id, payload, times FROM event_conflicts"):
            e, kept = r["id"], stored.get(r["id"])
            if recorder.get(e) not in rolled or kept is None:
                continue
            try:
                sent = json.loads(r["payload"])
                same = (sent.get("phone") == kept["phone"] and sent.get("session") == kept["session"] and sent.get("name") == kept["name"]
                        and int(sent.get("ts")) == int(kept["ts"]) and bool(sent.get("offline")) == bool(int(kept["offline"]))
                        and sent.get("props") == json.loads(kept["props"]))
            except (ValueError, TypeError):
                same = False
            if same:
                n += int(r["times"])
        return n

    def check_telemetry(self, stores, phones):
        queued = sum(p["telemetry_queued"] for p in phones.values())
        st = stores.get("telemetry")
        if st is None or not st.has_table("events"):
            self.check("telemetry", True, "n/a (no telemetry store)")
            return
        conflicting = 0
        if st.has_table("ingest_totals"):
            for r in st.rows("SELECT conflicting FROM ingest_totals"):
                conflicting += int(r["conflicting"])
        if conflicting:
            self.example("telemetry", "%d event ids arrived with two different payloads" % conflicting)
        if queued:
            self.example("telemetry", "%d events still queued on the phones" % queued)
        if any(p["recorded"] is None for p in phones.values()):
            return self.check_telemetry_counts(st, phones, queued, conflicting)
        # Event by event: the ids every phone recorded against the ids stored.
        recorder = {}
        for name, p in phones.items():
            for i in p["recorded"]:
                recorder[i] = name
        times = Counter()
        under = {}
        for r in st.rows("SELECT id, phone FROM events"):
            times[r["id"]] += 1
            under[r["id"]] = r["phone"]
        # An event a rolled-back phone file lost while it was queued never
        # reached the collector: the device's loss (the lost check counts it).
        forgotten = set()
        for p in phones.values():
            forgotten |= p.get("forgotten_events") or set()
        missing = sorted(i for i in recorder if i not in times and i not in forgotten)
        # A rolled-back phone sends again events its lost file had already
        # sent, in a batch formed anew: the same event, another queued_ms
        # (the batch's age). The collector keeps the first and counts the
        # second conflicting; that is the device's doing, not a collision.
        resent = self.resent_after_rollback(st, phones, recorder) if conflicting else 0
        if resent:
            conflicting -= resent
            self.example("telemetry", "%d deliveries after a rollback differed from the stored event only in queued_ms (not counted conflicting)" % resent)
        twice = sorted(i for i, n in times.items() if n > 1)
        unmade = sorted(i for i in times if i not in recorder)
        moved = sorted(i for i in times if i in recorder and under[i] != recorder[i])
        for i in missing[:3]:
            self.example("telemetry", "missing: event %s recorded by %s, not in the store" % (i, recorder[i]))
        for i in twice[:3]:
            self.example("telemetry", "twice: event %s stored %d times" % (i, times[i]))
        for i in unmade[:3]:
            self.example("telemetry", "unmade: event %s stored under %s, recorded by no phone" % (i, under[i]))
        for i in moved[:3]:
            self.example("telemetry", "event %s recorded by %s, stored under %s" % (i, recorder[i], under[i]))
        self.telemetry = {"recorded": len(recorder), "stored": sum(times.values()), "missing": len(missing), "twice": len(twice),
                          "unmade": len(unmade), "other_phone": len(moved), "queued": queued, "conflicting": conflicting}
        ok = not (missing or twice or unmade or moved or queued or conflicting)
        self.check("telemetry", ok, "%d recorded by the phones, %d stored: %d missing, %d twice, %d recorded by no phone, "
                   "%d under another phone, %d queued, %d conflicting" % (
                       len(recorder), sum(times.values()), len(missing), len(twice), len(unmade), len(moved), queued, conflicting))

    def check_telemetry_counts(self, st, phones, queued, conflicting):
        """Without the phones' history: counts against quad-edge's report."""
        report = None
        if self.args.edge_report and os.path.exists(self.args.edge_report):
            try:
                report = json.load(open(self.args.edge_report))
            except ValueError:
                report = None
        stored = 0
        for r in st.rows("SELECT phone, COUNT(*) AS n FROM events GROUP BY phone"):
            if r["phone"] in phones:
                stored += int(r["n"])
        accepted = None
        if isinstance(report, dict):
            accepted = (report.get("telemetry") or {}).get("accepted")
        ok = queued == 0 and conflicting == 0 and (accepted is None or stored >= int(accepted))
        if accepted is not None and stored < int(accepted):
            self.example("telemetry", "the phones were told %d events were stored as new; the collector has %d of theirs" % (accepted, stored))
        self.check("telemetry", ok, "counts only (the phones kept no history): %d stored, %s acknowledged as new, %d queued, %d conflicting" % (
            stored, "?" if accepted is None else accepted, queued, conflicting))

    def check_analytics(self, stores):
        """Analytics, once caught up, agrees with the services: the same
        orders with the same status, the same parking holds with the same
        status. Waits up to --settle seconds for it to catch up."""
        import time
        a = stores.get("analytics")
        if a is None or not a.has_table("orders") or not a.has_table("holds"):
            self.check("analytics", True, "n/a (no analytics store)")
            return
        pairs = []
        if "orders" in stores and stores["orders"].has_table("orders"):
            pairs.append(("orders", "SELECT id, status FROM orders", stores["orders"], "SELECT id, status FROM orders"))
        if "reservations" in stores and stores["reservations"].has_table("reservations"):
            pairs.append(("holds", "SELECT id, status FROM holds", stores["reservations"], "SELECT id, status FROM reservations"))
        deadline = time.time() + self.args.settle
        while True:
            diffs = []
            sizes = []
            for name, aq, st, sq in pairs:
                truth = {r["id"]: r["status"] for r in st.rows(sq)}
                seen = {r["id"]: r["status"] for r in a.rows(aq)}
                sizes.append("%d %s" % (len(truth), name))
                for k in sorted(set(truth) | set(seen)):
                    if truth.get(k) != seen.get(k):
                        diffs.append("%s %s: service says %s, analytics %s" % (name, k, truth.get(k, "nothing"), seen.get(k, "nothing")))
            if not diffs or time.time() >= deadline:
                break
            time.sleep(1)
        for d in diffs[:5]:
            self.example("analytics", d)
        self.check("analytics", not diffs, "%d disagreements over %s" % (len(diffs), ", ".join(sizes) or "nothing"))

    # ------------------------------------------------------------ output

    def verdict(self):
        ok = all(r[1] for r in self.results)
        lines = []
        c = self.counts
        lines.append("actions: attempted %d, acknowledged %d, ok %d, failed %d, indeterminate %d, lost %d, duplicated %d, out of order %d" % (
            c["attempted"], c["acknowledged"], c["ok"], c["failed"], c["indeterminate"], c["lost"], c["duplicated"], c["out_of_order"]))
        lat = getattr(self, "latency", None)
        if lat and lat["count"]:
            lines.append("action latency, made to settled (offline time included): p50 %d ms, p95 %d ms, p99 %d ms, max %d ms (%d actions)" % (
                lat["p50_ms"], lat["p95_ms"], lat["p99_ms"], lat["max_ms"], lat["count"]))
        lines.append("")
        lines.append("%-11s %-6s %s" % ("CHECK", "RESULT", "FIGURES"))
        for name, good, figure, _ in self.results:
            lines.append("%-11s %-6s %s" % (name, "ok" if good else "FAIL", figure))
            if not good:
                for e in self.examples.get(name, []):
                    lines.append("              e.g. " + e)
        lines.append("")
        lines.append("verdict: %s (%d checks, %d failed)" % ("PASS" if ok else "FAIL", len(self.results),
                                                          sum(1 for r in self.results if not r[1])))
        return ok, "\n".join(lines)

    def json(self):
        return {
            "valid": all(r[1] for r in self.results),
            "counts": dict(self.counts),
            "phones": len(getattr(self, "phones", {})),
            "latency": getattr(self, "latency", None),
            "telemetry": getattr(self, "telemetry", None),
            "stock_units": getattr(self, "stock_units", None),
            "sessions": getattr(self, "sessions", None),
            "checks": [{"name": n, "ok": g, "figures": f, "examples": self.examples.get(n, [])} for n, g, f, _ in self.results],
        }


def read_phone_file(f, history_only=False):
    """What the checker reads of one phone file (history_only: a file a
    rollback replaced: its actions, history and telemetry queue)."""
    db = sqlite3.connect("file:%s?mode=ro" % f, uri=True, timeout=30)
    db.row_factory = sqlite3.Row
    try:
        actions = [dict(r) for r in db.execute(
            "SELECT a.*, a.rowid AS rowid, o.seq AS queued_seq FROM action_log a LEFT JOIN outbox o ON o.id = a.id ORDER BY a.created_ms, a.rowid")]
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        recorded = made = None
        telemetry_queue = {r[0] for r in db.execute("SELECT id FROM telemetry")}
        if HISTORY_TABLES <= tables:
            recorded = {r[0] for r in db.execute("SELECT id FROM chaos_telemetry")} | telemetry_queue
            made = {r["id"]: dict(r) for r in db.execute("SELECT id, type, body FROM chaos_actions")}
        # The rental each orders.return is about: from the phone's
        # returns (the last return of each rental), then the history.
        returns = {}
        if "returns" in tables:
            cols = {r[1] for r in db.execute("PRAGMA table_info(returns)")}
            if "action" in cols:
                returns = {r[0]: r[1] for r in db.execute("SELECT action, rental FROM returns WHERE action IS NOT NULL")}
        for ident, m in (made or {}).items():
            if m["type"] == "orders.return":
                try:
                    returns.setdefault(ident, json.loads(m["body"]).get("order"))
                except (ValueError, AttributeError):
                    pass
        if history_only:
            return {"actions": actions, "recorded": recorded, "made": made, "telemetry_queue": telemetry_queue, "returns": returns}
        outbox = db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]
        user = db.execute("SELECT user_id FROM session").fetchone()
        # The user's news as the phone keeps it (Messages.swift).
        inbox = [dict(r) for r in db.execute("SELECT id, user_id FROM inbox")] if "inbox" in tables else None
        # The session log (quad-edge --record-views on) and the
        # saved copies it is compared with.
        shown = saved_orders = saved_products = None
        if "shown" in tables:
            shown = [dict(r) for r in db.execute("SELECT n, at_ms, kind, view, object, version, action FROM shown ORDER BY n")]
            saved_orders = {r["id"]: int(r["version"]) for r in db.execute(
                "SELECT id, version FROM orders WHERE pending IS NULL AND version > 0")}
            saved_products = {}
            for r in db.execute("SELECT body FROM saved WHERE key LIKE 'catalog.product.get %'"):
                try:
                    body = json.loads(r["body"])
                    saved_products[body["id"]] = int(body.get("version") or 0)
                except (ValueError, KeyError, TypeError):
                    pass
    except sqlite3.DatabaseError as e:
        raise RuntimeError("%s: %s" % (f, e))
    finally:
        db.close()
    return {"actions": actions, "outbox": outbox, "telemetry_queued": len(telemetry_queue),
            "user": user[0] if user else None, "recorded": recorded, "made": made, "returns": returns,
            "inbox": inbox, "shown": shown, "saved_orders": saved_orders, "saved_products": saved_products,
            "forgotten_events": set()}


def merge_rolled_back(replaced, phone):
    """One phone's history across the files its rollbacks replaced (oldest
    first) and its file now. An action keeps its place from the file that
    first had it and its outcome from the last that has it; an action only
    a replaced file had is `forgotten` (the device lost it: the services may
    still have applied it, and one acknowledged must be applied). Telemetry
    events the phone recorded and lost while still queued (never
    acknowledged) are `forgotten_events`: the device's loss, not the
    system's."""
    files = replaced + [phone]
    latest, order = {}, []
    for k, part in enumerate(files):
        for a in part["actions"]:
            if a["id"] not in latest:
                order.append(a["id"])
            latest[a["id"]] = (k, a)
    now_ids = {a["id"] for a in phone["actions"]}
    actions = []
    for n, ident in enumerate(order):
        a = dict(latest[ident][1])
        a["rowid"] = n + 1  # the phone's order across its files
        a["forgotten"] = ident not in now_ids
        actions.append(a)
    merged = dict(phone)
    merged["actions"] = actions
    merged["rolled_back"] = len(replaced)
    # The rental of each return, whichever file knew it (a return made
    # before a damage is in the file kept as it was).
    returns = {}
    for part in files:
        returns.update(part["returns"])
    merged["returns"] = returns
    if all(part["made"] is not None for part in files):
        made = {}
        for part in files:
            made.update(part["made"])
        merged["made"] = made
    if all(part["recorded"] is not None for part in files):
        recorded = set(phone["recorded"])
        forgotten = set()
        for part in replaced:
            forgotten |= (part["telemetry_queue"] - recorded)
        for part in replaced:
            recorded |= part["recorded"]
        merged["recorded"] = recorded
        merged["forgotten_events"] = forgotten
    return merged


def parse_cart(text):
    """A cart as JSON text (product -> quantity), or None."""
    if not text:
        return None
    try:
        cart = json.loads(text)
    except ValueError:
        return None
    if not isinstance(cart, dict):
        return None
    return Counter({str(k): int(v) for k, v in cart.items() if int(v) > 0})


def reply_cart(text):
    """The cart in a stored reply envelope of a cart action (its body's
    lines, product -> quantity), or None for a refusal or no lines."""
    try:
        envelope = json.loads(text)
    except (ValueError, TypeError):
        return None
    if not isinstance(envelope, dict) or envelope.get("kind") == "error":
        return None
    lines = (envelope.get("body") or {}).get("lines") if isinstance(envelope.get("body"), dict) else None
    if not isinstance(lines, list):
        return None
    cart = Counter()
    for line in lines:
        if isinstance(line, dict) and isinstance(line.get("product"), str):
            q = int(line.get("quantity") or 0)
            if q > 0:
                cart[line["product"]] += q
    return cart


def fault_events(path, t0_ms):
    """From faults.log: the broker deaths [(K, ms)] and the clock windows
    {service: [(start ms, end ms)]} (a skew without a restore lasts to the
    end), in ms since the epoch given the run's start t0_ms."""
    import re
    out = {"broker_kills": [], "clock": defaultdict(list)}
    if not path or not os.path.exists(path) or t0_ms is None:
        return out
    open_ = {}
    for line in open(path):
        m = re.match(r"\[\s*(\d+)s\] (.*)", line.strip())
        if not m or "FAILED" in line:
            continue
        at, what = t0_ms + int(m.group(1)) * 1000, m.group(2)
        k = re.match(r"broker: kill broker (\d+) ", what)
        if k:
            out["broker_kills"].append((k.group(1), at))
        c = re.match(r"clock: (\w+)/(\d+) ([+-]\d+)s \(restarted", what)
        if c:
            # 1 s of margin: the log line follows the kill.
            open_[(c.group(1), c.group(2))] = at - 1000
        c = re.match(r"clock: (\w+)/(\d+) restored", what)
        if c and (c.group(1), c.group(2)) in open_:
            # The restarted worker takes a moment to replace the skewed one.
            out["clock"][c.group(1)].append((open_.pop((c.group(1), c.group(2))), at + 5000))
    for (svc, _), start in open_.items():
        out["clock"][svc].append((start, float("inf")))
    return out


KINDS = ("broker", "pg", "edge", "clock", "disk")


def fault_windows(path, restart_s=2.0):
    """Fault windows [start, end) in seconds from the run's start, from the
    run's faults.log ("[  12s] partition phones | broker", "heal ...",
    "pause catalog for 3 s", "kill orders ...", "scale catalog to 3 ...")."""
    import re
    windows, open_ = [], {}
    if not path or not os.path.exists(path):
        return windows
    for line in open(path):
        m = re.match(r"\[\s*(\d+)s\] (.*)", line.strip())
        if not m:
            continue
        t, what = int(m.group(1)), m.group(2)
        tag = what.split(": ", 1)[0] if ": " in what else None
        if tag in KINDS and "FAILED" not in what:
            body = what.split(": ", 1)[1]
            if body.startswith("partition "):
                open_[tag + ":" + body[len("partition "):]] = t
            elif body.startswith("heal ") and tag + ":" + body[len("heal "):] in open_:
                pair = body[len("heal "):]
                windows.append({"kind": tag, "what": tag + " partition " + pair, "start": open_.pop(tag + ":" + pair), "end": t})
            elif body.startswith("kill broker"):
                windows.append({"kind": tag, "what": body.split(" (")[0], "start": t, "end": t + restart_s})
            elif body.startswith("restart postgres (starting"):
                open_[tag + ":restart"] = t
            elif body.startswith("restart postgres done") and tag + ":restart" in open_:
                start = open_.pop(tag + ":restart")
                windows.append({"kind": tag, "what": "restart postgres", "start": start, "end": max(t, start + 1)})
            elif body.startswith("kill quad-edge ("):
                open_[tag + ":edge"] = t
            elif body.startswith("quad-edge restarted") and tag + ":edge" in open_:
                windows.append({"kind": tag, "what": "kill quad-edge", "start": open_.pop(tag + ":edge"), "end": t + 1})
            elif body.startswith("host pg's disk full ("):
                open_[tag + ":pg"] = t
            elif body.startswith("host pg's disk emptied") and tag + ":pg" in open_:
                windows.append({"kind": tag, "what": "disk full pg", "start": open_.pop(tag + ":pg"), "end": t})
            elif re.match(r"\S+ quad-edge killed inside", body):
                open_[tag + ":crash"] = t
            elif body.startswith("quad-edge restarted") and tag + ":crash" in open_:
                windows.append({"kind": tag, "what": "crash quad-edge", "start": open_.pop(tag + ":crash"), "end": t + 1})
            elif re.match(r"\S+ file (rolled back|corrupted)", body):
                windows.append({"kind": tag, "what": ("rollback " if " rolled back" in body else "corrupt ") + body.split(" ")[0],
                                "start": t, "end": t + 1})
            elif re.match(r"\S+ [+-]\d+s \(restarted", body):
                open_[tag + ":" + body.split(" ")[0]] = t
                open_["skew:" + body.split(" ")[0]] = body.split(" ")[1]
            elif " restored" in body and tag + ":" + body.split(" ")[0] in open_:
                w = body.split(" ")[0]
                windows.append({"kind": tag, "what": "clock %s %s" % (w, open_.pop("skew:" + w, "")), "start": open_.pop(tag + ":" + w), "end": t})
            continue
        if what.startswith("partition ") and "FAILED" not in what:
            open_[what[len("partition "):]] = t
        elif what.startswith("heal ") and what[len("heal "):] in open_:
            pair = what[len("heal "):]
            windows.append({"kind": "partition", "what": "partition " + pair, "start": open_.pop(pair), "end": t})
        elif what.startswith("pause ") and "no live" not in what:
            m2 = re.match(r"pause (\S+) for (\d+) s", what)
            if m2:
                windows.append({"kind": "pause", "what": "pause " + m2.group(1), "start": t, "end": t + int(m2.group(2))})
        elif what.startswith("kill ") and "no live" not in what:
            windows.append({"kind": "kill", "what": what.split(" (")[0], "start": t, "end": t + restart_s})
        elif what.startswith("scale ") and what.endswith("(starting)"):
            open_["scale:" + what] = t
        elif what.startswith("scale ") and what.endswith(" done"):
            key = "scale:" + what[:-len(" done")] + " (starting)"
            if key in open_:
                windows.append({"kind": "scale", "what": what[:-len(" done")], "start": open_.pop(key), "end": t})
    for key, t in open_.items():
        if key.startswith("skew:"):
            continue
        kind = key.split(":", 1)[0] if key.split(":", 1)[0] in KINDS + ("scale",) else "partition"
        windows.append({"kind": kind, "what": key, "start": t, "end": None})
    return windows


def html_report(path, checker, windows, t0_ms, title, alerts_doc=None):
    """An HTML page: the verdict, and an SVG plot of action latency and
    throughput over time with the fault windows shaded (as Jepsen's plots);
    with alerts_doc (alerts.json), a third panel: each alert's firings as
    bars, one row an alert, beside the same fault windows."""
    import html
    points = []  # (finish s, latency ms, outcome)
    made = []
    for p in checker.phones.values():
        for a in p["actions"]:
            made.append((int(a["created_ms"]) - t0_ms) / 1000.0)
            if a["finished_ms"] is not None and a["code"] != "dropped":
                points.append(((int(a["finished_ms"]) - t0_ms) / 1000.0, max(1, int(a["finished_ms"]) - int(a["created_ms"])), a["outcome"]))
    firings = []  # (alert, what, start s, stop s)
    for a in (alerts_doc or {}).get("alerts", []):
        what = a["alert"] + "".join(" " + a["labels"][k] for k in ("instance", "service") if k in a["labels"])
        firings.append((a["alert"], what, a["first"] - t0_ms / 1000.0, a["last"] - t0_ms / 1000.0))
    rows_a = sorted({f[0] for f in firings})
    end = max([x for x, _, _ in points] + made + [w["end"] or 0 for w in windows] + [f[3] for f in firings] + [1])
    W, L, R, H1, H2, T, G = 960, 60, 20, 260, 140, 30, 40
    HA = (16 * max(1, len(rows_a)) + 40) if alerts_doc is not None else 0
    pw = W - L - R
    def X(t):
        return L + pw * max(0.0, t) / end
    import math
    top = max([y for _, y, _ in points] + [10])
    ly = math.log10(top) + 0.1
    def Y1(ms):
        return T + H1 - H1 * math.log10(ms) / ly
    colors = {"partition": "#f4a3a3", "kill": "#9fc5e8", "pause": "#ffe599", "scale": "#b6d7a8",
              "broker": "#c27ba0", "pg": "#8e7cc3", "edge": "#e69138", "clock": "#76a5af"}
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">' % (W, T + H1 + G + H2 + 40 + HA)]
    ya = T + H1 + G + H2 + 40 + 24  # the alerts panel, under the legend
    for k, w in enumerate(windows):
        x1, x2 = X(w["start"]), X(w["end"] if w["end"] is not None else end)
        for y0, h in ((T, H1), (T + H1 + G, H2)) + (((ya, HA - 40),) if HA else ()):
            out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" opacity="0.55"><title>%s, %s to %s s</title></rect>' % (
                x1, y0, max(1.5, x2 - x1), h, colors.get(w["kind"], "#ddd"), html.escape(w["what"]), w["start"], w["end"]))
    # Latency panel (log scale).
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>' % (L, T, pw, H1))
    for e in range(0, int(ly) + 1):
        y = Y1(10 ** e)
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ccc"/><text x="%d" y="%.1f" text-anchor="end">%s</text>' % (
            L, L + pw, y, y, L - 4, y + 4, ("%d ms" % 10 ** e) if e < 3 else ("%g s" % (10 ** e / 1000))))
    for x, y, outcome in points:
        out.append('<circle cx="%.1f" cy="%.1f" r="1.8" fill="%s"/>' % (X(x), Y1(y), "#1f77b4" if outcome == "done" else "#ff7f0e"))
    out.append('<text x="%d" y="%d" font-weight="bold">action latency, made to settled (blue done, orange rejected; log scale)</text>' % (L, T - 10))
    # Throughput panel: actions settled per second.
    per = [0] * (int(end) + 1)
    for x, _, _ in points:
        if 0 <= x <= end:
            per[int(x)] += 1
    mk = [0] * (int(end) + 1)
    for x in made:
        if 0 <= x <= end:
            mk[int(x)] += 1
    top2 = max(per + mk + [1])
    y0 = T + H1 + G
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>' % (L, y0, pw, H2))
    def Y2(v):
        return y0 + H2 - H2 * v / top2
    out.append('<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="%s"/>' % " ".join("%.1f,%.1f" % (X(i + 0.5), Y2(v)) for i, v in enumerate(per)))
    out.append('<polyline fill="none" stroke="#999" stroke-dasharray="3,2" points="%s"/>' % " ".join("%.1f,%.1f" % (X(i + 0.5), Y2(v)) for i, v in enumerate(mk)))
    out.append('<text x="%d" y="%d" font-weight="bold">throughput: actions settled per second (blue), made per second (grey dashed)</text>' % (L, y0 - 8))
    out.append('<text x="%d" y="%.1f" text-anchor="end">%d/s</text><text x="%d" y="%d" text-anchor="end">0</text>' % (L - 4, y0 + 8, top2, L - 4, y0 + H2))
    step = next((s for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800) if end / s <= 12), 3600)
    for t in range(0, int(end) + 1, step):
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d s</text>' % (X(t), y0 + H2 + 14, t))
    lx = L
    for kind, c in colors.items():
        out.append('<rect x="%d" y="%d" width="12" height="10" fill="%s"/><text x="%d" y="%d">%s</text>' % (lx, y0 + H2 + 24, c, lx + 16, y0 + H2 + 33, kind))
        lx += 80
    if HA:
        # The alerts: a row an alert, a red bar a firing, over the fault windows.
        out.append('<text x="%d" y="%d" font-weight="bold">alerts firing (Prometheus, ALERTS{alertstate="firing"}), over the same fault windows</text>' % (L, ya - 8))
        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>' % (L, ya, pw, HA - 40))
        for i, name in enumerate(rows_a):
            y = ya + 4 + 16 * i
            out.append('<text x="%d" y="%d" font-size="10">%s</text>' % (L + 4, y + 10, html.escape(name)))
            for alert, what, a, b in firings:
                if alert == name:
                    out.append('<rect x="%.1f" y="%d" width="%.1f" height="12" fill="#cc0000" opacity="0.8"><title>%s, %.0f to %.0f s</title></rect>' % (
                        X(a), y, max(2.0, X(b + 1) - X(a)), html.escape(what), a, b))
        if not rows_a:
            out.append('<text x="%d" y="%d">no alert fired</text>' % (L + 4, ya + 14))
    out.append("</svg>")
    ok, text = checker.verdict()
    rows = "".join('<tr><td>%s</td><td class="%s">%s</td><td>%s</td></tr>' % (
        html.escape(n), "ok" if g else "fail", "ok" if g else "FAIL", html.escape(f)) for n, g, f, _ in checker.results)
    faults = "".join("<li>%s: %s to %s s</li>" % (html.escape(w["what"]), w["start"], w["end"] if w["end"] is not None else "end")
                     for w in windows)
    page = """<!doctype html><html><head><meta charset="utf-8"><title>%s</title>
<style>body{font-family:sans-serif;margin:24px;max-width:1000px} td{padding:2px 10px} .ok{color:#080} .fail{color:#c00;font-weight:bold}
pre{background:#f6f6f6;padding:8px}</style></head><body>
<h1>%s</h1><p><b>Verdict: %s</b></p><pre>%s</pre>%s
<h2>Checks</h2><table>%s</table><h2>Faults</h2><ul>%s</ul>%s</body></html>
""" % (html.escape(title), html.escape(title), "PASS" if ok else "FAIL", html.escape(text.split("\n\n")[0]), "\n".join(out), rows, faults or "<li>none</li>",
       ("<h2>Alerts</h2><ul>%s</ul>" % ("".join("<li>%s: %.0f to %.0f s</li>" % (html.escape(w), a, b) for _, w, a, b in firings) or "<li>none fired</li>"))
       if alerts_doc is not None else "")
    with open(path, "w") as f:
        f.write(page)


def check_alerts(checker, path, windows):
    """The alerts check, from the run's alerts.json and fault windows
    (deploy/quaddeploy/alerts.py). Returns (the record, the result)."""
    from quaddeploy import alerts as alerts_mod
    try:
        doc = json.load(open(path))
    except (OSError, ValueError) as e:
        checker.check("alerts", False, "no alert record: %s" % e)
        return None, {"ok": False, "figure": str(e)}
    r = alerts_mod.check(doc, windows)
    checker.check("alerts", r["ok"], r["figure"])
    for e in r["examples"]:
        checker.example("alerts", e)
    return doc, r


def main():
    ap = cli.Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--home", default=os.environ.get("QUAD_HOME", ".quad"), help="the stack's QUAD_HOME (default $QUAD_HOME or .quad)")
    ap.add_argument("--phones", help="folder of the phones' files (default HOME/phones)")
    ap.add_argument("--edge-report", help="quad-edge's JSON report (quad-edge run --report), for the telemetry check")
    ap.add_argument("--json", help="also write the verdict as JSON to this file")
    ap.add_argument("--faults", help="the run's faults.log: fault windows for the JSON and the plot")
    ap.add_argument("--t0", type=int, help="the run's start, ms since the epoch (the faults' zero)")
    ap.add_argument("--html", help="also write an HTML report with an SVG plot of latency and throughput")
    ap.add_argument("--settle", type=float, default=0, help="seconds to wait for analytics to catch up (default 0)")
    ap.add_argument("--skew-tolerance", type=float, default=5, metavar="S",
                    help="seconds two clocks may disagree by (the run's largest clock offset plus 5 s; default 5): "
                         "the holds and deadlines checks allow it")
    ap.add_argument("--alerts", metavar="FILE",
                    help="the run's alerts.json (deploy/chaos run --prometheus): adds the alerts check, and the alerts to the plot")
    ap.add_argument("--title", default="Quad chaos run", help="the HTML report's title")
    ap.add_argument("--install-history", type=int, metavar="N", help="install the history recorder in N phone files of --phones, then exit")
    ap.add_argument("--history-sql", action="store_true", help="print the history recorder's SQL (quad-edge --file-sql runs it on every phone file it opens), then exit")
    ap.add_argument("--wait", type=float, default=120, help="--install-history: seconds to wait for the phone files (default 120)")
    args = ap.parse_args()
    args.home = os.path.abspath(args.home)
    args.phones = args.phones or os.path.join(args.home, "phones")
    if args.history_sql:
        print(HISTORY_SQL)
        return 0
    if args.install_history is not None:
        return install_history(args.phones, args.install_history, args.wait)
    c = Checker(args)
    try:
        c.run()
    except (RuntimeError, sqlite3.DatabaseError, OSError, subprocess.TimeoutExpired) as e:
        print("checker: cannot read the stores: %s" % e, file=sys.stderr)
        return 2
    windows = fault_windows(args.faults)
    alerts_doc = alerts_result = None
    if args.alerts:
        alerts_doc, alerts_result = check_alerts(c, args.alerts, windows)
    ok, text = c.verdict()
    print(text)
    t0 = args.t0
    if t0 is None:
        t0 = min([int(a["created_ms"]) for p in c.phones.values() for a in p["actions"]] or [0])
    if args.json:
        verdict = c.json()
        verdict["faults"] = windows
        if alerts_result is not None:
            verdict["alerts"] = alerts_result
        with open(args.json, "w") as f:
            json.dump(verdict, f, indent=2)
            f.write("\n")
    if args.html:
        html_report(args.html, c, windows, t0, args.title, alerts_doc)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
