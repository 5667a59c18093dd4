"""Hostile clients against a real stack, started with deploy/stack as a user
starts it: an anonymous client with nothing but the broker's public key, two
students, and the admin, each trying what an attacker would (issue 12).

Every test here failed on the code before the hardening: stored replies read
back by another caller, an order confirmed at 0 through a NUL, unknown
services held by the broker, a body that grew on re-encoding and took the
workers down, fresh connections and made-up `src` as new rate budgets, logins
guessed without limit, tokens that could not end, a published admin password,
telemetry attributed from the body, pids shown to strangers.

Environment: QUAD_HOSTILE_PORT_BASE (where the search for a free port base starts, default 18800), QUAD_STACK_TIMEOUT
(seconds for deploy/stack up, default 300). deploy/stack sees the rest of the
environment (QUAD_BUILD_DIR, QUAD_BIN_DIR).
"""

import json
import os
import secrets
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import zmq

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))
import quadclient  # noqa: E402
from quadclient import body_of, error_code  # noqa: E402

# The first free port base from QUAD_HOSTILE_PORT_BASE (default 18800): every port
# of the stack free, so a stack of the machine on its own ports is left alone.
PORT_BASE = quadclient.free_port_base(int(os.environ.get("QUAD_HOSTILE_PORT_BASE", "18800")))
STACK_TIMEOUT = float(os.environ.get("QUAD_STACK_TIMEOUT", "300"))
ADMIN = "admin@quad.campus"


class Stack:
    def __init__(self, home, endpoint):
        self.home, self.endpoint = home, endpoint
        self.key = quadclient.broker_key(home)
        self.clients = []

    def client(self, src="hostile-test", keys=None):
        c = quadclient.Client(self.endpoint, self.key, keys=keys, src=src)
        self.clients.append(c)
        return c

    def admin_password(self):
        return Path(self.home, "keys", "admin.password").read_text().strip()

    def signed_in(self, email, password, src="hostile-test"):
        c = self.client(src=src)
        answer = c.call("accounts.login", {"email": email, "password": password}, timeout=30)
        assert error_code(answer) is None, answer
        c.token = answer["body"]["token"]
        c.user = answer["body"]["user"]
        c.email, c.password = email, password
        return c

    def student(self, name="Student"):
        email = f"s-{secrets.token_hex(5)}@uni.edu"
        password = "pw-" + secrets.token_urlsafe(10)
        reg = self.client().call("accounts.register", {"email": email, "password": password, "name": name, "semester": 4}, timeout=30)
        assert error_code(reg) is None, reg
        return self.signed_in(email, password)

    def admin(self):
        return self.signed_in(ADMIN, self.admin_password())

    def client_of_each_broker(self):
        """One client on each broker of the stack, alone."""
        out = []
        for e in self.frontends.split(","):
            c = quadclient.Client(e, self.key, src="hostile-test")
            self.clients.append(c)
            out.append(c)
        return out


@pytest.fixture(scope="module")
def stack():
    launched = quadclient.LaunchedStack("quad-hostile-", PORT_BASE, timeout=STACK_TIMEOUT)
    launched.env.pop("QUAD_ADMIN_PASSWORD", None)  # the admin's password is the one the stack makes
    try:
        launched.up()
    except quadclient.StackFailed as e:
        pytest.fail(str(e))
    s = Stack(launched.home, launched.frontend)
    s.up_output = launched.up_output
    s.run = launched.run
    s.frontends = launched.frontends
    try:
        yield s
    finally:
        for c in s.clients:
            c.close()
        launched.down()


# ---------------------------------------------------------------- 1. replies


def test_a_stored_reply_belongs_to_whoever_made_it(stack):
    ana, ben = stack.student("Ana"), stack.student("Ben")
    rid = quadclient.uuid7()
    first = ana.call("favorites.add", {"product": "p-0003"}, id_=rid)
    assert error_code(first) is None, first
    again = ana.call("favorites.add", {"product": "p-0003"}, id_=rid)
    assert again["body"] == first["body"], "the same caller's retry must get the stored reply"
    # An anonymous client's record is bound to its CURVE key.
    anon_id = quadclient.uuid7()
    anon, stranger = stack.client(), stack.client()
    reg = {"email": f"a-{secrets.token_hex(4)}@uni.edu", "password": "long-enough-1", "name": "A", "semester": 2}
    assert error_code(anon.call("accounts.register", reg, id_=anon_id, timeout=30)) is None
    taken = stranger.call("accounts.register", reg, id_=anon_id, timeout=30)
    assert error_code(taken) == "conflict" and reg["email"] not in json.dumps(taken), taken
    for who, type_, body in [(ben, "favorites.add", {"product": "p-0003"}),
                             (ben, "favorites.remove", {"product": "p-0003"}),
]:
        answer = who.call(type_, body, id_=rid)
        assert error_code(answer) == "conflict", (type_, answer)
        assert "another caller" in answer["body"]["message"], answer
        assert "p-0003" not in json.dumps(answer) and ana.user not in json.dumps(answer), answer
    # Without a sign-in: refused, and nothing of the stored reply.
    answer = stack.client().call("favorites.add", {"product": "p-0003"}, id_=rid)
    assert error_code(answer) in ("unauthorized", "conflict") and "p-0003" not in json.dumps(answer), answer
    # The same caller with another type of the same service is refused too
    # (each service keeps the records of its own requests).
    answer = ana.call("favorites.remove", {"product": "p-0003"}, id_=rid)
    assert error_code(answer) == "conflict", answer


def test_the_orders_saga_records_are_bound_to_the_buyer(stack):
    ana, ben = stack.student("Ana"), stack.student("Ben")
    oid = quadclient.uuid7()
    order = ana.call("orders.place", {"source": "buy_now", "product": "p-0005", "screen": "home"}, id_=oid, timeout=15)
    assert body_of(order).get("status") == "confirmed", order
    stolen = ben.call("orders.place", {"source": "buy_now", "product": "p-0005", "screen": "home"}, id_=oid, timeout=15)
    assert error_code(stolen) == "conflict", stolen
    assert str(order["body"].get("total")) not in json.dumps(stolen["body"].get("details")), stolen
    mine = ben.call("orders.mine", {"limit": 10})
    assert all(o.get("order") != order["body"]["order"] for o in body_of(mine).get("orders", [])), mine


def test_another_caller_never_replaces_a_queued_request(stack):
    """Two callers send the same id at once: the one whose request reaches
    the broker first keeps its answer, the other gets a conflict, and neither
    ever gets the other's answer. Which arrives first is the network's
    choice (two connections), so the test accepts either order."""
    ana, ben = stack.student("Ana"), stack.student("Ben")
    rid = quadclient.uuid7()
    for c, product in ((ana, "p-0006"), (ben, "p-0007")):
        env = quadclient.envelope("favorites.add", {"product": product}, rid, c.token, c.src, 10000)
        c.send(env)
    a, b = ana.receive(rid, 10), ben.receive(rid, 10)
    assert a is not None and b is not None, (a, b)
    answers = {"p-0006": a, "p-0007": b}
    won = [p for p, r in answers.items() if error_code(r) is None]
    assert len(won) == 1, (a, b)
    assert answers[won[0]]["body"].get("product") == won[0], answers[won[0]]
    lost = [r for p, r in answers.items() if p not in won]
    assert error_code(lost[0]) == "conflict" and "p-000" not in json.dumps(lost[0]["body"]), lost[0]


# ----------------------------------------------------------------- 2. strings


@pytest.mark.parametrize("type_,body", [
    ("orders.place", {"source": "buy_now", "product": "p-0001\u0000", "screen": "home"}),
    ("favorites.add", {"product": "p-0001\u0000"}),
    ("catalog.products.list", {"q": "iph\u0000one"}),
    ("orders.cart.add", {"product": "p-0002\u0000x"}),
    ("reservations.hold", {"destination": "ML\u0000"}),
])
def test_a_nul_in_a_string_is_refused(stack, type_, body):
    ana = stack.student()
    answer = ana.call(type_, body, timeout=15)
    assert error_code(answer) == "bad_request", answer
    assert "NUL" in answer["body"]["message"] or "U+0000" in answer["body"]["message"], answer



def _listing(name, price=12.5, **more):
    body = {"name": name, "category": "Study", "collection": "Study Tools", "price": {"value": price, "currency": "USD"},
            "type": "Calculator", "condition": "Used", "quantity": 1, "mode": "sale"}
    body.update(more)
    return body


@pytest.mark.parametrize("text,char", [
    ("Calc \u001b[2J\u001b[Hpaid", "U+001B"),          # ESC: a terminal's screen wiped
    ("Calc \u009b31m", "U+009B"),                       # C1 CSI
    ("Calc \u202eSU 00.1$", "U+202E"),                  # right-to-left override: "$1.00 US" read backwards
    ("Calc \u2066x\u2069", "U+2066"),                   # a bidi isolate
    ("Calc\nSeller verified by Quad", "U+000A"),        # a second line in a one-line name
])
def test_what_a_user_writes_cannot_change_how_another_sees_it(stack, text, char):
    ana = stack.student()
    answer = ana.call("catalog.listings.create", _listing(text), timeout=15)
    assert error_code(answer) == "bad_request", answer
    assert answer["body"]["message"].startswith(f"body.name must not contain {char}"), answer
    # In a nested field, and in a display name, alike.
    answer = ana.call("catalog.listings.create", _listing("Calc", info={"color": text}), timeout=15)
    assert error_code(answer) == "bad_request" and "body.info.color" in answer["body"]["message"], answer
    answer = ana.call("accounts.profile.update", {"name": text}, timeout=15)
    assert error_code(answer) == "bad_request" and "body.name" in answer["body"]["message"], answer
    # Letters of every script pass.
    ok = ana.call("catalog.listings.create", _listing("Calculadora científica 日本 ✓"), timeout=15)
    assert error_code(ok) is None, ok


@pytest.mark.parametrize("price", [0.001, 5e-324, 19.999])
def test_a_price_is_a_whole_number_of_cents(stack, price):
    ana = stack.student()
    answer = ana.call("catalog.listings.create", _listing("Calc", price=price), timeout=15)
    assert error_code(answer) == "bad_request", answer
    assert answer["body"]["message"].startswith("body.price.value must be a whole number of cents"), answer
    answer = ana.call("catalog.listings.create", _listing("Calc", mode="rent", rent_rate=price), timeout=15)
    assert error_code(answer) == "bad_request" and "body.rent_rate" in answer["body"]["message"], answer
    good = ana.call("catalog.listings.create", _listing("Calc", price=19.99), timeout=15)
    assert error_code(good) is None and good["body"]["product"]["price"]["value"] == 19.99, good


def test_a_nul_in_a_field_name_or_an_anonymous_request_is_refused(stack):
    anon = stack.client()
    answer = anon.call("accounts.register", {"email": "n@uni.edu", "password": "long-enough-1", "name": "N\u0000", "semester": 2})
    assert error_code(answer) == "bad_request", answer
    answer = anon.call("catalog.products.list", {"q\u0000": "x"})
    assert error_code(answer) == "bad_request", answer


def test_a_limit_counts_scalars_not_characters(stack):
    ana = stack.student()
    note = "a" + "\u0301" * 100_000  # one grapheme cluster, 200 KB
    answer = ana.call("reservations.car.save", {"lat": 4.6, "lon": -74.06, "level": "P1", "note": note})
    assert error_code(answer) == "bad_request", answer


# ------------------------------------------------------------------ 3. broker


def test_an_unknown_service_is_answered_at_once_and_not_kept(stack):
    anon = stack.client()
    started = time.monotonic()
    answer = anon.call("nosuchservice.op", {}, timeout=20, deadline=3_600_000)
    assert error_code(answer) == "not_found", answer
    assert "no service named" in answer["body"]["message"], answer
    assert time.monotonic() - started < 5, "an unknown service must be answered at once, not at the deadline"
    listed = [s["name"] for s in body_of(anon.call("sys.services")).get("services", [])]
    assert "nosuchservice" not in listed, listed


def test_more_frames_than_the_protocol_allows_are_refused(stack):
    anon = stack.client()
    # An MDP/0.2 REQUEST with two body frames: Quad's envelope is one.
    anon.send_raw(quadclient.frames(quadclient.envelope("catalog.sys.health")) + [b"b"])
    answer = anon.receive(None, 5)
    if answer is not None:
        assert error_code(answer) == "bad_request", answer
    # The broker still serves others.
    assert error_code(stack.client().call("catalog.sys.health")) is None


def test_the_broker_passes_the_body_through_and_workers_survive_a_poison_body(stack):
    """A body of backslash escapes grew threefold when the broker re-encoded
    it and went over the worker socket's limit, taking the workers down."""
    ana = stack.student()
    before = {s["name"]: len(s.get("workers", [])) or s.get("live", 0)
              for s in body_of(ana.call("sys.services"))["services"]}
    pad = "\b" * 300_000  # 1.8 MB as escapes would be re-encoded
    for _ in range(4):
        answer = ana.call("catalog.product.get", {"id": "p-0001", "pad": pad}, timeout=10)
        assert answer is not None, "a big escaped body must be answered"
        assert error_code(answer) in (None, "bad_request", "too_large"), answer
    time.sleep(4)  # three missed heartbeats would drop a crashed worker
    after = {s["name"]: len(s.get("workers", [])) or s.get("live", 0)
             for s in body_of(ana.call("sys.services"))["services"]}
    assert all(after.get(name, 0) >= n for name, n in before.items()), (before, after)


def test_a_flooding_key_is_limited_and_another_key_is_not(stack):
    flooder, other = stack.client(src="flooder"), stack.client(src="other")
    ids = []
    for k in range(400):
        env = quadclient.envelope("catalog.sys.health", {}, src=f"made-up-{k}")  # a new src each time
        ids.append(env["id"])
        flooder.send(env)
    codes = {}
    deadline = time.monotonic() + 30
    while len(ids) and time.monotonic() < deadline:
        answer = flooder.receive(None, 2)
        if answer is None:
            break
        ids.remove(answer.get("corr")) if answer.get("corr") in ids else None
        code = error_code(answer)
        codes[code] = codes.get(code, 0) + 1
    assert codes.get("too_many_requests", 0) > 0, f"a made-up src must not give a new budget: {codes}"
    answer = other.call("catalog.sys.health", {}, retry_429=False)
    assert error_code(answer) is None, answer


def test_fresh_connections_give_no_new_budget(stack):
    codes = {}
    context = zmq.Context()
    socks = []
    # More than the address's burst (address_rate_burst, 1000), on fresh keys
    # below the address's handshake budget. Every connection is made first
    # and the requests sent after: sent while the handshakes ran, they would
    # reach the broker over as long as those took, and on a busy machine
    # the address's refill (500 a second) would serve them all.
    for _ in range(120):
        socks.append(quadclient.Client(stack.endpoint, stack.key, context=context, monitored=True))
    slow = [c for c in socks if not c.connected(timeout=60)]
    assert not slow, f"{len(slow)} of 120 fresh connections did not complete their CURVE handshake in 60 s"
    batches = [[quadclient.envelope("catalog.sys.health", src="fresh-" + secrets.token_hex(6)) for _ in range(12)] for _ in socks]
    for c, batch in zip(socks, batches):
        for env in batch:
            c.send(env)
    until = time.monotonic() + 30
    for c in socks:
        for _ in range(12):
            answer = c.receive(None, max(0.1, until - time.monotonic()))
            code = error_code(answer)
            codes[code] = codes.get(code, 0) + 1
        c.close()
    context.term()
    assert codes.get("too_many_requests", 0) > 0, f"1440 requests on 120 fresh keys in a burst were all served: {codes}"
    # A signed-in user keeps its own budget.
    ana = stack.student()
    assert error_code(ana.call("catalog.sys.health", retry_429=False)) is None


# ---------------------------------------------------------------- 4. accounts


def test_failed_logins_are_throttled_and_the_user_is_not_locked_out(stack):
    ana = stack.student()
    guesser = stack.client()
    throttled = None
    for k in range(30):
        answer = guesser.call("accounts.login", {"email": ana.email, "password": f"guess-{k}"}, timeout=30, retry_429=False)
        if error_code(answer) == "too_many_requests":
            throttled = answer
            break
        assert error_code(answer) == "unauthorized", answer
    assert throttled is not None, "30 wrong passwords in a row were all checked"
    wait = throttled["body"]["details"]["retry_after_ms"]
    assert 0 < wait <= 120_000, throttled
    # The owner gets in after the wait, from a connection of its own.
    time.sleep(wait / 1000 + 0.2)
    back = stack.client().call("accounts.login", {"email": ana.email, "password": ana.password}, timeout=30)
    assert error_code(back) is None, back



def test_failed_logins_are_counted_once_across_the_accounts_workers(stack):
    """The stack runs two accounts workers: the guesses before the first 429
    are those the limit allows (login_free_failures 5, then a sixth that
    starts the wait), whichever worker each reaches, not twice as many. Each
    guess comes from a new CURVE key, so only the account's count grows."""
    workers = stack.run("status").stdout
    assert "accounts/2" in workers, f"the default stack runs two accounts workers: {workers}"
    ana = stack.student()
    answers = []
    for k in range(14):
        guesser = stack.client()
        answer = guesser.call("accounts.login", {"email": ana.email, "password": f"guess-{k}"}, timeout=30, retry_429=False)
        answers.append(error_code(answer))
        if error_code(answer) == "too_many_requests":
            assert "this account" in answer["body"]["message"], answer
            break
    assert answers == ["unauthorized"] * 6 + ["too_many_requests"], answers


# ---------------------------------------------------------------- 5. sessions


def _refused_within(client, token, seconds):
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        answer = client.call("accounts.profile.get", {}, token=token)
        if error_code(answer) == "unauthorized":
            return answer
        time.sleep(0.1)
    return None


def test_logout_ends_a_token_within_a_second(stack):
    ana = stack.student()
    token = ana.token
    assert error_code(ana.call("accounts.profile.get")) is None
    out = ana.call("accounts.logout", {"token": token})
    assert error_code(out) is None, out
    refused = _refused_within(stack.client(), token, 1.5)
    assert refused is not None, "a token still worked after logout"
    assert "revoked" in refused["body"]["message"], refused


def test_a_password_change_ends_earlier_tokens_and_refresh_gives_a_new_one(stack):
    ana = stack.student()
    second = stack.signed_in(ana.email, ana.password)
    fresh = ana.call("accounts.refresh", {"token": ana.token})
    assert error_code(fresh) is None, fresh
    assert fresh["body"]["token"] != ana.token
    change = second.call("accounts.profile.update", {"password": "new-pass-" + secrets.token_hex(4), "current_password": ana.password})
    assert error_code(change) is None, change
    assert _refused_within(stack.client(), ana.token, 1.5) is not None
    assert _refused_within(stack.client(), fresh["body"]["token"], 1.5) is not None



def test_a_reused_refresh_token_ends_the_sessions_of_its_family(stack):
    ana = stack.student()
    phone = stack.client()
    login = phone.call("accounts.login", {"email": ana.email, "password": ana.password}, timeout=30)
    assert error_code(login) is None, login
    first_token, first_refresh = login["body"]["token"], login["body"]["refresh_token"]
    rid = quadclient.uuid7()
    renewed = phone.call("accounts.refresh", {"refresh_token": first_refresh}, id_=rid)
    assert error_code(renewed) is None, renewed
    # A thief with a copy of the refresh token and the request id (a
    # captured request) gets no session: the stored reply is the phone's.
    thief = stack.client()
    stolen = thief.call("accounts.refresh", {"refresh_token": first_refresh}, id_=rid)
    assert error_code(stolen) == "conflict", stolen
    assert renewed["body"]["token"] not in json.dumps(stolen) and renewed["body"]["refresh_token"] not in json.dumps(stolen)
    # The phone's own retry gets the same answer again.
    again = phone.call("accounts.refresh", {"refresh_token": first_refresh}, id_=rid)
    assert again["body"]["token"] == renewed["body"]["token"], again
    # Both tokens work, until the old refresh token is used a second time.
    for token in (first_token, renewed["body"]["token"]):
        assert error_code(stack.client().call("accounts.profile.get", {}, token=token)) is None
    reused = thief.call("accounts.refresh", {"refresh_token": first_refresh})
    assert error_code(reused) == "unauthorized" and "used already" in reused["body"]["message"], reused
    # Every session token of the family ends at every broker within a second.
    brokers = stack.client_of_each_broker()
    assert len(brokers) == 2, stack.frontends
    for token in (first_token, renewed["body"]["token"]):
        for at in brokers:
            refused = _refused_within(at, token, 1.5)
            assert refused is not None, f"a session token of a reused family still works at {at.endpoints}"
    assert error_code(phone.call("accounts.refresh", {"refresh_token": renewed["body"]["refresh_token"]})) == "unauthorized"


def test_token_lifetime_is_an_hour(stack):
    ana = stack.student()
    login = stack.client().call("accounts.login", {"email": ana.email, "password": ana.password}, timeout=30)
    left = login["body"]["expires_at"] - time.time() * 1000
    assert 3_500_000 < left <= 3_600_000 + 5000, left


# ----------------------------------------------------------------- 6. secrets


def test_the_admin_password_is_made_at_random_and_kept_private(stack):
    path = Path(stack.home, "keys", "admin.password")
    mode = stat.S_IMODE(path.stat().st_mode)
    assert mode == 0o600, oct(mode)
    password = stack.admin_password()
    assert len(password) >= 16 and password != "quad-admin-pass"
    assert str(path) in stack.up_output, "deploy/stack up must say where the admin password is"
    args = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert password not in args, "a secret is on a command line"
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        assert "quad-admin-pass" not in page.read_text(), f"{page.relative_to(ROOT)} names the old default password"
    assert error_code(stack.client().call("accounts.login", {"email": ADMIN, "password": password}, timeout=30)) is None


def test_nothing_under_quad_home_is_readable_by_other_users(stack):
    for sub in ("logs", "db", "keys", "run"):
        folder = Path(stack.home, sub)
        if not folder.exists():
            continue
        for p in [folder, *folder.rglob("*")]:
            if p.is_symlink() or p.is_socket():
                continue
            mode = stat.S_IMODE(p.stat().st_mode)
            assert mode & 0o077 == 0 or (p.is_dir() and mode & 0o007 == 0), f"{p} is mode {oct(mode)}"


# --------------------------------------------------------------- 7. telemetry


def test_telemetry_is_attributed_by_the_token(stack):
    ana, ben, admin = stack.student("Ana"), stack.student("Ben"), stack.admin()
    stats = body_of(admin.call("telemetry.raw.since", {"after": 0, "limit": 1}))
    after = stats.get("last", 0)
    eid = quadclient.uuid7()
    event = {"id": eid, "phone": "ph-hostile", "user": ben.user, "session": "s-hostile", "name": "view.opened",
             "ts": int(time.time() * 1000), "offline": False, "props": {"view": "favorites"}}
    answer = ana.call("telemetry.ingest", {"events": [event]})
    assert error_code(answer) is None, answer
    anon_id = quadclient.uuid7()
    anon = stack.client().call("telemetry.ingest", {"events": [dict(event, id=anon_id)]})
    assert error_code(anon) is None, anon
    found = {}
    until = time.monotonic() + 10
    while len(found) < 2 and time.monotonic() < until:
        page = body_of(admin.call("telemetry.raw.since", {"after": after, "limit": 1000}))
        for e in page.get("events", []):
            if e["id"] in (eid, anon_id):
                found[e["id"]] = e.get("user")
        time.sleep(0.2)
    assert found.get(eid) == ana.user, found
    assert anon_id in found and found[anon_id] is None, found


# ------------------------------------------------------------ 8. the surface


def test_instances_and_pids_are_for_admins_only(stack):
    for who in (stack.client(), stack.student()):
        text = json.dumps(body_of(who.call("sys.services")))
        assert '"pid"' not in text and '"instance"' not in text, text
        metrics = json.dumps(body_of(who.call("catalog.sys.metrics")))
        assert '"pid"' not in metrics and '"instance"' not in metrics, metrics
    text = json.dumps(body_of(stack.admin().call("sys.services")))
    assert '"pid"' in text, text


def test_the_dashboard_takes_no_credential_in_a_url(stack):
    port = PORT_BASE + 80
    token_file = Path(stack.home, "keys", "analytics.token")
    token = token_file.read_text().strip() if token_file.exists() else stack.admin().token
    for url in (f"http://127.0.0.1:{port}/dashboard/?token={token}", f"http://127.0.0.1:{port}/dashboard/summary.json?token={token}"):
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                page = r.read().decode(errors="replace")
                assert "Sign in" in page or "sign in" in page, f"{url} served the dashboard with a token in the URL"
        except urllib.error.HTTPError as e:
            assert e.code in (401, 403), e



def test_a_dashboard_session_ends_within_a_second_of_its_users_logout(stack):
    """Every channel a token opened ends with it: the dashboard's cookie
    session too, when the admin logs out of every session elsewhere."""
    import http.client
    import urllib.parse
    port = PORT_BASE + 80

    def fetch(method, path, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()

    form = urllib.parse.urlencode({"email": ADMIN, "password": stack.admin_password()})
    status, headers, _ = fetch("POST", "/signin", form, {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 303 and "quad_session=" in headers.get("Set-Cookie", ""), (status, headers)
    cookie = headers["Set-Cookie"].split(";", 1)[0]
    status, _, body = fetch("GET", "/dashboard/", headers={"Cookie": cookie})
    assert status == 200, (status, body[:200])
    admin = stack.admin()
    out = admin.call("accounts.logout", {"token": admin.token, "all": True})
    assert error_code(out) is None, out
    until = time.monotonic() + 1.5
    while time.monotonic() < until:
        status, headers, _ = fetch("GET", "/dashboard/", headers={"Cookie": cookie})
        if status == 303 and headers.get("Location") == "/signin":
            break
        time.sleep(0.1)
    assert status == 303, f"the dashboard session still served the page after the admin logged out everywhere: {status}"


# ------------------------------------------------------ 9. the dashboard seen

BROWSERS = ("/usr/bin/chromium-headless-shell", "/usr/lib/chromium/chromium-headless-shell", "/usr/bin/chromium")


def headless(args, url):
    """Runs headless Chromium on `url` with a profile of its own; returns its stdout."""
    import shutil
    import tempfile
    browser = next((b for b in BROWSERS if os.access(b, os.X_OK)), None)
    if browser is None:
        if os.environ.get("QUAD_REQUIRE_BROWSER") == "1":
            pytest.fail("no headless Chromium: apt-get install chromium-headless-shell")
        pytest.skip("no headless Chromium (apt-get install chromium-headless-shell)")
    profile = tempfile.mkdtemp(prefix="quad-chromium-")
    try:
        run = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
                              f"--user-data-dir={profile}", "--virtual-time-budget=5000", *args, url],
                             capture_output=True, timeout=120)
        return run.stdout.decode(errors="replace")
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def test_the_dashboard_in_a_browser_signs_in_and_shows_parkwises_twelve_cards(stack):
    """The admin signs in through the sign-in form in headless Chromium, as
    a person would (a page on the same host posts it, so the SameSite=Strict
    cookie follows the redirect); the page then holds ParkWise's BQ1 to BQ12,
    in order, each naming its app, type and owner, and a Refresh button. The
    screenshot goes to QUAD_TEST_ARTIFACTS."""
    import html
    import http.server
    import re
    import threading
    dashboard = f"http://127.0.0.1:{PORT_BASE + 80}"
    form = (f'<!doctype html><form method="post" action="{dashboard}/signin">'
            f'<input name="email" value="{html.escape(ADMIN)}"><input name="password" value="{html.escape(stack.admin_password())}"></form>'
            '<script>document.forms[0].submit()</script>').encode()

    class Form(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(form)))
            self.end_headers()
            self.wfile.write(form)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", PORT_BASE + 84), Form)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{PORT_BASE + 84}/"
        dom = headless(["--dump-dom"], url)
        numbers = re.findall(r'data-number="(BQ\d+)"', dom)
        assert numbers == [f"BQ{n}" for n in range(1, 13)], f"ParkWise's cards: {numbers}\n{dom[:800]}"
        for n in range(1, 13):
            card = dom.split(f'data-number="BQ{n}"', 1)[1].split("</section>", 1)[0]
            meta = re.search(r'<p class="meta">([^<]*)</p>', card).group(1)
            assert re.match(rf"ParkWise · BQ{n} · Type [1-4]: [^·]+ · owner [^·]+ · [a-z_]+ · \d+ rows?$", html.unescape(meta)), meta
        assert '<button id="refresh" type="submit">Refresh</button>' in dom
        artifacts = Path(os.environ.get("QUAD_TEST_ARTIFACTS") or Path(stack.home) / "artifacts")
        artifacts.mkdir(parents=True, exist_ok=True)
        png = artifacts / "dashboard-stack.png"
        png.unlink(missing_ok=True)
        headless([f"--screenshot={png}", "--window-size=1280,4800"], url)
        data = png.read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 50_000, f"{png}: {len(data)} bytes"
        print(f"dashboard screenshot: {png}")
    finally:
        server.shutdown()
        server.server_close()
