"""The wire contract in protos/ against itself and against real traffic.

Offline (always): every schema is a valid JSON Schema 2020-12 whose $refs
resolve, every example validates against the schema its path names, every
invalid body and malformed envelope fails.

Live (tests named test_live_*): requests built from the examples go to a real
broker and every answer is checked against the schemas. The broker is the one
at QUAD_FRONTEND when that is set; otherwise this module starts the stack
with deploy/stack on a port base of its own and stops it afterwards. A stack
that does not start fails the live tests; it never skips them. To run only
the offline part: pytest -k "not live".

Environment: QUAD_FRONTEND (use a running broker), QUAD_PROTOS_PORT_BASE
(where the search for a free port base starts, default 18700), QUAD_STACK_TIMEOUT (seconds for deploy/stack up, default 300),
QUAD_REPLY_TIMEOUT (seconds to wait for one reply, default 3). deploy/stack
sees the rest of the environment, so QUAD_BUILD_DIR or QUAD_BIN_DIR choose
which build it runs (and where it builds when sources changed).
"""

import json
import os
import re
import secrets
import shutil
import sys
import time
from pathlib import Path

import pytest
import zmq
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))
import quadclient  # noqa: E402
PROTOS = ROOT / "protos"
EXAMPLES = PROTOS / "examples"
MALFORMED = EXAMPLES / "malformed"
INVALID = EXAMPLES / "invalid"
ID_BASE = "https://quad.local/protos/"

# The first free port base from QUAD_PROTOS_PORT_BASE (default 18700): every port
# of the stack free, so a stack of the machine on its own ports is left alone.
PORT_BASE = quadclient.free_port_base(int(os.environ.get("QUAD_PROTOS_PORT_BASE", "18700")))
STACK_TIMEOUT = float(os.environ.get("QUAD_STACK_TIMEOUT", "300"))
REPLY_TIMEOUT = float(os.environ.get("QUAD_REPLY_TIMEOUT", "3"))
OVERSIZE_BYTES = 3 * (1 << 19)  # 1.5 MiB, over max_message_bytes (1 MiB)
BODY_KINDS = ("request", "reply", "event")


# ---------------------------------------------------------------------------
# The layout: schemas, examples, and the rule that maps one to the other.

def _rel(path):
    return path.relative_to(PROTOS).as_posix()


def _is_case(path):
    return path.is_file() and not path.name.startswith("_") and path.name != "README.md"


SCHEMA_PATHS = sorted(p for p in PROTOS.rglob("*.json") if EXAMPLES not in p.parents)
SCHEMAS = {_rel(p): json.loads(p.read_text()) for p in SCHEMA_PATHS}
REGISTRY = Registry().with_resources(
    (s["$id"], Resource.from_contents(s, default_specification=DRAFT202012))
    for s in SCHEMAS.values() if "$id" in s
)
EXAMPLE_PATHS = sorted(
    p for p in EXAMPLES.rglob("*.json")
    if _is_case(p) and MALFORMED not in p.parents and INVALID not in p.parents
)
INVALID_PATHS = sorted(p for p in INVALID.rglob("*.json") if _is_case(p))
MALFORMED_EXPECTED = json.loads((MALFORMED / "_expected.json").read_text())
MALFORMED_PATHS = sorted(p for p in MALFORMED.iterdir() if _is_case(p))


def _base_name(name):
    """products.list.request+search.json -> products.list.request.json"""
    m = re.fullmatch(r"([^+]+?)(\+[A-Za-z0-9_.-]+)?\.json", name)
    assert m, f"example name {name!r} is not <schema name>[+<variant>].json"
    return m.group(1) + ".json"


def schema_path_for(example, root=EXAMPLES):
    """examples/<dir>/<name>[+variant].json validates against
    protos/<dir>/<name>.json, or, when there is no such file, against
    protos/<dir>.schema.json (examples/envelope/*, examples/error/*)."""
    rel = example.relative_to(root)
    direct = PROTOS / rel.parent / _base_name(rel.name)
    if direct.is_file():
        return _rel(direct)
    whole = PROTOS / f"{rel.parent.as_posix()}.schema.json"
    if whole.is_file():
        return _rel(whole)
    raise AssertionError(f"{example.relative_to(ROOT)}: no schema at {direct.relative_to(ROOT)} or {whole.relative_to(ROOT)}")


def validator(schema_rel):
    return Draft202012Validator(SCHEMAS[schema_rel], registry=REGISTRY)


def errors_of(schema_rel, instance):
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
            for e in validator(schema_rel).iter_errors(instance)]


def body_schema_for(type_, kind):
    """The body schema of an envelope: <service>.<op> of kind request, reply or
    event has protos/<service>/<op>.<kind>.json, or, for the operations every
    service answers (sys.health, events.since), protos/common/<op>.<kind>.json."""
    if kind == "error":
        return "error.schema.json"
    service, _, op = type_.partition(".")
    for candidate in (f"{service}/{op}.{kind}.json", f"common/{op}.{kind}.json"):
        if candidate in SCHEMAS:
            return candidate
    return None


def request_type(example, root=EXAMPLES):
    """The request type an example of examples/<dir>/<op>.request.json is for:
    <dir>.<op>, except common/, whose operations every service answers as
    <service>.<op>; returns (service or None for common, op)."""
    rel = example.relative_to(root)
    op = _base_name(rel.name)[: -len(".request.json")]
    service = rel.parts[0]
    return (None if service == "common" else service), op


def _ids(paths, root):
    return [p.relative_to(root).as_posix() for p in paths]


# ---------------------------------------------------------------------------
# Offline: the schemas and the examples.

@pytest.mark.parametrize("rel", sorted(SCHEMAS))
def test_schema_is_valid_2020_12(rel):
    schema = SCHEMAS[rel]
    assert schema.get("$schema") == "https://json-schema.org/draft/2020-12/schema", rel
    assert schema.get("$id") == ID_BASE + rel, f"{rel}: $id must be {ID_BASE + rel}"
    Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("rel", sorted(SCHEMAS))
def test_schema_annotations(rel):
    """x-quad-auth on a request schema: who may call it (user: signed in,
    admin: role admin, service: Quad's own services or an admin); absent means
    anyone. x-quad-kind: query or mutation, on every request schema.
    x-quad-audience on an event schema: everyone (the broker's public
    updates socket carries it to any phone) or user (only to that user's
    phones); absent means Quad's services only."""
    schema = SCHEMAS[rel]
    if "x-quad-auth" in schema:
        assert rel.endswith(".request.json"), f"{rel}: x-quad-auth belongs on request schemas"
        assert schema["x-quad-auth"] in ("user", "admin", "service"), f"{rel}: x-quad-auth is user, admin or service"
    if rel.endswith(".request.json"):
        assert schema.get("x-quad-kind") in ("query", "mutation"), f"{rel}: x-quad-kind is query or mutation"
    if "x-quad-audience" in schema:
        assert rel.endswith(".event.json"), f"{rel}: x-quad-audience belongs on event schemas"
        assert schema["x-quad-audience"] in ("everyone", "user"), f"{rel}: x-quad-audience is everyone or user"
    unknown = [k for k in schema if k.startswith("x-") and k not in ("x-quad-auth", "x-quad-kind", "x-quad-limit", "x-quad-audience")]
    assert not unknown, f"{rel}: unknown annotations {unknown}"


@pytest.mark.parametrize("rel", sorted(SCHEMAS))
def test_schema_refs_resolve(rel):
    resolver = REGISTRY.resolver(base_uri=SCHEMAS[rel]["$id"])

    def walk(node, resolver):
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                resolved = resolver.lookup(node["$ref"])  # raises when it does not resolve
                assert isinstance(resolved.contents, (dict, bool))
            for key, value in node.items():
                if key not in ("const", "enum", "default", "examples"):
                    walk(value, resolver)
        elif isinstance(node, list):
            for value in node:
                walk(value, resolver)

    walk(SCHEMAS[rel], resolver)


def test_every_body_schema_has_an_example_and_every_request_a_reply():
    bodies = [r for r in SCHEMAS if re.search(r"\.(request|reply|event)\.json$", r)]
    covered = {schema_path_for(p) for p in EXAMPLE_PATHS}
    missing = [r for r in bodies if r not in covered]
    assert not missing, f"body schemas without an example under protos/examples/: {missing}"
    orphans = [r for r in bodies if r.endswith(".request.json") and r.replace(".request.json", ".reply.json") not in SCHEMAS]
    assert not orphans, f"request schemas without a reply schema: {orphans}"


@pytest.mark.parametrize("example", EXAMPLE_PATHS, ids=_ids(EXAMPLE_PATHS, EXAMPLES))
def test_example_validates(example):
    instance = json.loads(example.read_text())
    rel = schema_path_for(example)
    errors = errors_of(rel, instance)
    assert not errors, f"{example.relative_to(ROOT)} against {rel}:\n" + "\n".join(errors)
    if rel == "envelope.schema.json":
        body_rel = body_schema_for(instance["type"], instance["kind"])
        assert body_rel, f"{example.name}: no body schema for {instance['type']} ({instance['kind']})"
        errors = errors_of(body_rel, instance.get("body", {}))
        assert not errors, f"{example.name} body against {body_rel}:\n" + "\n".join(errors)


@pytest.mark.parametrize("example", INVALID_PATHS, ids=_ids(INVALID_PATHS, INVALID))
def test_invalid_body_fails_its_schema(example):
    rel = schema_path_for(example, root=INVALID)
    assert rel.endswith(".request.json"), f"{example.name}: invalid examples are request bodies"
    assert errors_of(rel, json.loads(example.read_text())), f"{example.relative_to(ROOT)} should fail {rel}"


def _parse_envelope(raw):
    """The envelope a server would read from these bytes, or the reason it cannot."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"not UTF-8: {e}"
    try:
        return json.loads(text), None
    except json.JSONDecodeError as e:
        return None, f"not JSON: {e}"


def test_malformed_cases_are_listed():
    assert sorted(MALFORMED_EXPECTED["cases"]) == sorted(p.name for p in MALFORMED_PATHS), \
        "protos/examples/malformed/_expected.json must list every case file, and only those"


@pytest.mark.parametrize("case", MALFORMED_PATHS, ids=_ids(MALFORMED_PATHS, MALFORMED))
def test_malformed_fails_envelope_validation(case):
    instance, reason = _parse_envelope(case.read_bytes())
    if reason is None:
        assert errors_of("envelope.schema.json", instance), f"{case.name} validates, but it is in malformed/"


def test_oversize_is_a_valid_envelope_over_the_limit():
    raw = oversize_envelope(new_id())
    assert len(raw) == OVERSIZE_BYTES > 1 << 20
    assert not errors_of("envelope.schema.json", json.loads(raw))


@pytest.mark.parametrize("code,status", [
    ("bad_request", 401), ("not_found", 400), ("too_large", 400), ("internal", 503), ("teapot", 418),
])
def test_error_code_and_status_must_agree(code, status):
    assert errors_of("error.schema.json", {"code": code, "status": status, "message": "x"})


@pytest.mark.parametrize("envelope", [
    {"v": 1, "id": "a", "type": "catalog.product.get", "kind": "reply", "body": {}},  # reply without corr
    {"v": 1, "id": "a", "type": "catalog.product.changed", "kind": "event", "body": {}},  # event without seq
    {"v": 1, "id": "a", "type": "catalog.product.get", "kind": "error", "corr": "b",
     "body": {"code": "not_found", "status": 404}},  # error body without message
    {"v": 1, "id": "a", "type": "catalog.product.get", "kind": "request", "extra": 1},  # unknown field
    {"v": 1, "id": "x" * 65, "type": "catalog.product.get", "kind": "request"},  # id too long
    {"v": 1, "id": "a", "type": "catalog.product.get", "kind": "request", "deadline": 3600001},
])
def test_envelope_rules(envelope):
    assert errors_of("envelope.schema.json", envelope)


# ---------------------------------------------------------------------------
# Live: the stack and a client.

def new_id():
    """A UUIDv7: 48 bits of Unix ms, version 7, variant 10, random bits."""
    b = bytearray(int(time.time() * 1000).to_bytes(6, "big") + secrets.token_bytes(10))
    b[6] = 0x70 | (b[6] & 0x0F)
    b[8] = 0x80 | (b[8] & 0x3F)
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def request_envelope(type_, body, id_=None):
    return {"v": 1, "id": id_ or new_id(), "type": type_, "kind": "request", "ts": int(time.time() * 1000),
            "src": "test/protos", "deadline": int(REPLY_TIMEOUT * 1000) - 500, "body": body}


def oversize_envelope(id_):
    env = request_envelope("catalog.product.get", {"id": "p-0001", "pad": ""}, id_)
    pad = OVERSIZE_BYTES - len(json.dumps(env, separators=(",", ":")).encode())
    env["body"]["pad"] = "x" * pad
    return json.dumps(env, separators=(",", ":")).encode()


# The broker's CURVE public key (Z85 bytes), or None with CURVE off: set by
# the frontend fixture from the stack it starts, else from QUAD_BROKER_KEY,
# QUAD_BROKER_KEY_FILE or $QUAD_HOME/keys/broker.pub, as quadctl finds it.
BROKER_KEY = None


def broker_key_from_env(home=None):
    given = os.environ.get("QUAD_BROKER_KEY")
    if given:
        return None if given == "off" else given.strip().encode()
    path = os.environ.get("QUAD_BROKER_KEY_FILE") or os.path.join(home or os.environ.get("QUAD_HOME", ""), "keys", "broker.pub")
    if os.path.isfile(path):
        return Path(path).read_text().strip().encode()
    return None


MDPC02, REQUEST, PARTIAL, FINAL = b"MDPC02", b"\x01", b"\x03", b"\x04"


def service_of(raw):
    """The MDP service frame for envelope bytes: the first segment of their
    type when it can be read, else catalog (the broker reads the envelope
    before it compares the two, so a broken one is refused for what it is)."""
    m = re.search(rb'"type"\s*:\s*"([a-z0-9_-]+)[".]', raw)
    return m.group(1) if m else b"catalog"


def exchange(endpoint, raw, timeout=REPLY_TIMEOUT):
    """Sends the envelope bytes raw as one MDP/0.2 REQUEST from a fresh
    DEALER; returns the reply's frames, or None after timeout. A fresh
    socket per exchange keeps answers to broken messages, which may carry no
    corr, from being confused."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 0
    if BROKER_KEY:
        sock.curve_serverkey = BROKER_KEY
        sock.curve_publickey, sock.curve_secretkey = zmq.curve_keypair()
    try:
        sock.connect(endpoint)
        sock.send_multipart([MDPC02, REQUEST, service_of(raw), raw])
        if not sock.poll(int(timeout * 1000)):
            return None
        return sock.recv_multipart()
    finally:
        sock.close()


def answer_to(endpoint, raw, timeout=REPLY_TIMEOUT):
    """The envelope answering raw, checked against envelope.schema.json.
    A 429 from the broker's rate limit (this module sends hundreds of
    requests from one src) is waited out as its retry_after_ms says, as any
    client should, and the same bytes are sent again."""
    for _ in range(50):
        envelope = _answer_once(endpoint, raw, timeout)
        body = envelope.get("body") if isinstance(envelope.get("body"), dict) else {}
        if envelope.get("kind") != "error" or body.get("code") != "too_many_requests":
            return envelope
        time.sleep(max(int(body.get("details", {}).get("retry_after_ms", 20)), 1) / 1000)
    return envelope


def _answer_once(endpoint, raw, timeout):
    frames = exchange(endpoint, raw, timeout)
    assert frames is not None, f"no answer from {endpoint} within {timeout} s"
    assert len(frames) == 4 and frames[:2] == [MDPC02, FINAL], \
        f"expected an MDP/0.2 FINAL [MDPC02, 0x04, service, envelope], got {len(frames)} frames {frames[:3]!r}"
    assert frames[2] == service_of(raw), f"the FINAL names service {frames[2]!r}, the request {service_of(raw)!r}"
    text = frames[-1].decode("utf-8")  # the answer itself must be UTF-8
    envelope = json.loads(text)
    errors = errors_of("envelope.schema.json", envelope)
    assert not errors, "answer is not a valid envelope:\n" + "\n".join(errors) + f"\n{text[:2000]}"
    return envelope


def call(endpoint, type_, body):
    """Sends a request; returns (request, answer)."""
    request = request_envelope(type_, body)
    return request, answer_to(endpoint, json.dumps(request).encode())


def _wait_for_catalog(endpoint, until):
    last = "no answer"
    while time.monotonic() < until:
        frames = exchange(endpoint, json.dumps(request_envelope("catalog.sys.health", {})).encode(), timeout=1)
        if frames:
            try:
                envelope = json.loads(frames[-1])
                if envelope.get("kind") == "reply":
                    return None
                last = json.dumps(envelope.get("body"))[:500]
            except ValueError as e:
                last = f"unreadable answer: {e}"
        time.sleep(0.3)
    return last


@pytest.fixture(scope="module")
def frontend():
    global BROKER_KEY
    given = os.environ.get("QUAD_FRONTEND")
    if given:
        BROKER_KEY = broker_key_from_env()
        problem = _wait_for_catalog(given, time.monotonic() + 10)
        if problem:
            pytest.fail(f"QUAD_FRONTEND={given} is set but catalog.sys.health is not answered there: {problem}")
        yield given
        return

    # The admin's first password is the one protos/examples/accounts/login.request.json shows
    # (deploy/stack up makes a random one otherwise).
    # Every exchange here is a fresh CURVE key from 127.0.0.1, about a hundred
    # a second: the broker's handshake limit per address (20 a second, a
    # burst of 200; test_hostile.py tests it) would refuse most of them and
    # leave some unanswered past REPLY_TIMEOUT while libzmq reconnects. This
    # stack checks the contract, so that limit is off here.
    launched = quadclient.LaunchedStack("quad-protos-", PORT_BASE, timeout=STACK_TIMEOUT,
                                        env={"QUAD_ADMIN_PASSWORD": "quad-admin-pass",
                                             "QUAD_HANDSHAKE_RATE_PER_ADDRESS": "0"})
    home, endpoint = launched.home, launched.frontend
    try:
        launched.up()
    except quadclient.StackFailed as e:
        pytest.fail(str(e))
    down = launched.down
    pub = Path(home, "keys", "broker.pub")
    BROKER_KEY = pub.read_text().strip().encode() if pub.is_file() else None
    problem = _wait_for_catalog(endpoint, time.monotonic() + 30)
    if problem:
        down()
        pytest.fail(f"deploy/stack up succeeded but catalog.sys.health is not answered at {endpoint} "
                    f"(logs in {home}): {problem}")

    previous = os.environ.get("QUAD_FRONTEND")
    os.environ["QUAD_FRONTEND"] = endpoint  # for quadctl, and anything else this session starts
    try:
        yield endpoint
    finally:
        if previous is None:
            os.environ.pop("QUAD_FRONTEND", None)
        else:
            os.environ["QUAD_FRONTEND"] = previous
        result = down()
        if result.returncode == 0:
            shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def services(frontend):
    """The services the broker routes to, from sys.services; catalog when that
    fails (test_live_request[sys/...] reports the failure)."""
    try:
        _, answer = call(frontend, "sys.services", {})
        names = [s["name"] for s in answer["body"]["services"] if s["workers"]]
        return names or ["catalog"]
    except Exception:
        return ["catalog"]


REQUEST_PATHS = [p for p in EXAMPLE_PATHS if _base_name(p.name).endswith(".request.json")]


def _check_reply(request, answer, reply_schema):
    where = f"{request['type']} {json.dumps(request['body'])[:200]}"
    assert answer["kind"] == "reply", f"{where}: expected a reply, got {answer['kind']}: {json.dumps(answer.get('body'))[:500]}"
    assert answer.get("corr") == request["id"], f"{where}: corr {answer.get('corr')!r} is not the request id"
    assert answer["type"] == request["type"], f"{where}: reply type {answer['type']!r}"
    errors = errors_of(reply_schema, answer.get("body", {}))
    assert not errors, f"{where}: reply body against {reply_schema}:\n" + "\n".join(errors)


def _check_refused(request, answer, codes):
    where = f"{request['type']} {json.dumps(request['body'])[:200]}"
    assert answer["kind"] == "error", f"{where}: expected an error {codes}, got a reply: {json.dumps(answer.get('body'))[:300]}"
    assert answer.get("corr") == request["id"], f"{where}: corr {answer.get('corr')!r} is not the request id"
    assert answer["type"] == request["type"], f"{where}: error type {answer['type']!r}"
    assert answer["body"]["code"] in codes, f"{where}: expected {codes}, got {answer['body']}"


# Requests for anyone whose example carries a credential only a live session
# holds (accounts.refresh's session token or refresh token): a live stack
# refuses them as unknown, 401, whatever else they say.
LIVE_CREDENTIAL_EXAMPLES = {"accounts/refresh.request.json", "accounts/refresh.request+refresh-token.json"}


@pytest.mark.parametrize("example", REQUEST_PATHS, ids=_ids(REQUEST_PATHS, EXAMPLES))
def test_live_request(frontend, services, example):
    service, op = request_type(example)
    body = json.loads(example.read_text())
    request_schema = schema_path_for(example)
    reply_schema = request_schema.replace(".request.json", ".reply.json")
    auth = SCHEMAS[request_schema].get("x-quad-auth")
    for name in [service] if service else services:
        request, answer = call(frontend, f"{name}.{op}", body)
        if auth or example.relative_to(EXAMPLES).as_posix() in LIVE_CREDENTIAL_EXAMPLES:
            # Sent without a token (or with a credential no live session
            # issued): refused before anything happens.
            _check_refused(request, answer, ("unauthorized", "forbidden"))
        else:
            _check_reply(request, answer, reply_schema)


def test_live_catalog_is_listed(frontend):
    request, answer = call(frontend, "sys.services", {})
    _check_reply(request, answer, "sys/services.reply.json")
    catalog = [s for s in answer["body"]["services"] if s["name"] == "catalog"]
    assert catalog and catalog[0]["workers"], f"sys.services lists no catalog worker: {answer['body']}"


def test_live_product_get_unknown_is_not_found(frontend):
    request, answer = call(frontend, "catalog.product.get", {"id": "p-does-not-exist"})
    assert answer["kind"] == "error" and answer.get("corr") == request["id"]
    assert (answer["body"]["code"], answer["body"]["status"]) == ("not_found", 404), answer["body"]


@pytest.mark.parametrize("example", INVALID_PATHS, ids=_ids(INVALID_PATHS, INVALID))
def test_live_invalid_body_is_bad_request(frontend, example):
    service, op = request_type(example, root=INVALID)
    request, answer = call(frontend, f"{service or 'catalog'}.{op}", json.loads(example.read_text()))
    auth = SCHEMAS[schema_path_for(example, root=INVALID)].get("x-quad-auth")
    _check_refused(request, answer, ("unauthorized", "forbidden") if auth else ("bad_request",))
    assert answer["body"]["status"] == {"bad_request": 400, "unauthorized": 401, "forbidden": 403}[answer["body"]["code"]]


def _with_fresh_id(raw):
    """The case's bytes with its id, if it has one, replaced by a fresh one;
    returns (bytes, id or None, whether a server can read the id)."""
    instance, reason = _parse_envelope(raw)
    if reason is None:
        if isinstance(instance, dict) and isinstance(instance.get("id"), str):
            instance["id"] = new_id()
            return json.dumps(instance).encode(), instance["id"], True
        return raw, None, False
    m = re.search(rb'"id"\s*:\s*"([0-9a-f-]{36})"', raw)
    if m:
        fresh = new_id()
        return raw.replace(m.group(1), fresh.encode()), fresh, False
    return raw, None, False


@pytest.mark.parametrize("case", MALFORMED_PATHS, ids=_ids(MALFORMED_PATHS, MALFORMED))
def test_live_malformed_is_answered(frontend, case):
    expected = MALFORMED_EXPECTED["cases"][case.name]
    raw, id_, readable = _with_fresh_id(case.read_bytes())
    answer = answer_to(frontend, raw)
    assert answer["kind"] == "error", f"{case.name} ({expected['why']}) was answered with {answer['kind']}"
    body = answer["body"]
    assert (body["code"], body["status"]) == (expected["code"], expected["status"]), \
        f"{case.name} ({expected['why']}): {body}"
    if readable:
        assert answer.get("corr") == id_, f"{case.name}: the id can be read, so corr must be it; got {answer.get('corr')!r}"
    elif "corr" in answer:
        assert answer["corr"] == id_, f"{case.name}: corr {answer['corr']!r} is not the message's id"


def test_live_oversize_is_too_large(frontend):
    id_ = new_id()
    answer = answer_to(frontend, oversize_envelope(id_))
    expected = MALFORMED_EXPECTED["generated"]["oversize"]
    assert answer["kind"] == "error", f"a {OVERSIZE_BYTES} byte envelope was answered with {answer['kind']}"
    assert (answer["body"]["code"], answer["body"]["status"]) == (expected["code"], expected["status"]), answer["body"]
    if "corr" in answer:
        assert answer["corr"] == id_


def test_live_still_serving_after_abuse(frontend):
    """Runs last in this module: after every malformed and oversize message,
    a good request still gets its reply."""
    request, answer = call(frontend, "catalog.product.get", json.loads((EXAMPLES / "catalog/product.get.request.json").read_text()))
    _check_reply(request, answer, "catalog/product.get.reply.json")


# ---------------------------------------------------------------------------
# The chaos checker and its tests name request and event types in strings:
# each must be one the contract declares (protos/ is generated from it).

CHECKER_FILES = [ROOT / "deploy" / "checker.py", ROOT / "Tests" / "e2e" / "test_chaos.py", ROOT / "Tests" / "e2e" / "test_chaos_faults.py"]
_TYPE_IN_CODE = re.compile(r"""["']((?:accounts|catalog|favorites|notifications|orders|reservations|telemetry|analytics|occupancy)\.[a-z_.]+)["']""")


@pytest.mark.parametrize("path", CHECKER_FILES, ids=[p.name for p in CHECKER_FILES])
def test_checker_types_are_declared(path):
    named = set(_TYPE_IN_CODE.findall(path.read_text()))
    assert named, f"{path.name} names no type: the pattern is stale"
    unknown = sorted(t for t in named if body_schema_for(t, "request") is None and body_schema_for(t, "event") is None)
    assert not unknown, f"{path.relative_to(ROOT)} names types that protos/ (the contract) does not declare: {unknown}"
