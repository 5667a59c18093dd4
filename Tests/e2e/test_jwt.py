"""Session tokens are standard JWTs (issue 15, point 3), checked from the
outside with PyJWT against a real stack started with deploy/stack: a token
from accounts.login verifies with the JWK Set from accounts.jwks (EdDSA,
Ed25519, RFC 8037) and says who, as what, until when; a token PyJWT signs
with accounts' own key is accepted by the broker; and the broker refuses,
with 401 and a message naming why, every forgery a JWT verifier must refuse:
alg none, HS256 keyed with the public key (the algorithm confusion attack),
an unknown kid, another key's signature, an expired token, a wrong audience
or issuer, a missing claim.

Every test here fails on the code before JWTs: tokens were
base64url(payload).base64url(signature) with times in ms, and there was no
accounts.jwks.

Environment: QUAD_JWT_PORT_BASE (where the search for a free port base starts, default 26500), QUAD_STACK_TIMEOUT
(seconds for deploy/stack up, default 300). Needs `pip install pyjwt
cryptography` (deploy/test installs them).
"""

import base64
import hashlib
import hmac
import json
import os
import secrets
import sys
import time
from pathlib import Path

import pytest

jwt = pytest.importorskip("jwt")
ed25519 = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ed25519")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))
import quadclient  # noqa: E402
from quadclient import body_of, error_code  # noqa: E402

# The first free port base from QUAD_JWT_PORT_BASE (default 26500): every port
# of the stack free, so a stack of the machine on its own ports is left alone.
PORT_BASE = quadclient.free_port_base(int(os.environ.get("QUAD_JWT_PORT_BASE", "26500")))
STACK_TIMEOUT = float(os.environ.get("QUAD_STACK_TIMEOUT", "300"))


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def compact(obj):
    return b64(json.dumps(obj, separators=(",", ":")).encode())


@pytest.fixture(scope="module")
def stack():
    launched = quadclient.LaunchedStack("quad-jwt-", PORT_BASE, timeout=STACK_TIMEOUT)
    try:
        launched.up()
    except quadclient.StackFailed as e:
        pytest.fail(str(e))
    clients = []

    def client(token=None):
        c = quadclient.Client(launched.frontend, launched.broker_key(), src="jwt-test")
        c.token = token
        clients.append(c)
        return c

    launched.client = client
    try:
        yield launched
    finally:
        for c in clients:
            c.close()
        launched.down()


@pytest.fixture(scope="module")
def session(stack):
    email = f"s-{secrets.token_hex(5)}@uni.edu"
    password = "pw-" + secrets.token_urlsafe(10)
    c = stack.client()
    reg = c.call("accounts.register", {"email": email, "password": password, "name": "Jay", "semester": 3}, timeout=30)
    assert error_code(reg) is None, reg
    login = c.call("accounts.login", {"email": email, "password": password}, timeout=30)
    assert error_code(login) is None, login
    return body_of(login)


@pytest.fixture(scope="module")
def jwks(stack):
    answer = stack.client().call("accounts.jwks", {}, timeout=30)
    assert error_code(answer) is None, answer
    return body_of(answer)


@pytest.fixture(scope="module")
def accounts_key(stack):
    """accounts' own signing key, read from $QUAD_HOME/keys/accounts.key
    (libsodium's 64 bytes: the seed, then the public key), to sign tokens
    that differ from a real one in one claim only."""
    raw = unb64(Path(stack.home, "keys", "accounts.key").read_text().strip())
    return ed25519.Ed25519PrivateKey.from_private_bytes(raw[:32])


def claims_of(session, **changes):
    c = jwt.decode(session["token"], options={"verify_signature": False})
    c.update(changes)
    return {k: v for k, v in c.items() if v is not None}


def refusal(stack, token):
    """The broker's answer to a request with `token`: must be a 401 from the broker itself."""
    answer = stack.client().call("accounts.profile.get", {}, token=token, timeout=30)
    assert answer is not None, "no answer"
    assert error_code(answer) == "unauthorized", answer
    assert answer["body"]["status"] == 401, answer
    assert answer.get("src") == "broker", f"the broker must refuse it, not a service: {answer}"
    return answer["body"]["message"]


def test_jwks_is_public_and_holds_accounts_ed25519_key(stack, jwks):
    keys = jwks["keys"]
    assert len(keys) == 1, jwks
    k = keys[0]
    assert (k["kty"], k["crv"], k["alg"], k["use"]) == ("OKP", "Ed25519", "EdDSA", "sig"), k
    pub = unb64(Path(stack.home, "keys", "accounts.pub").read_text().strip())
    assert unb64(k["x"]) == pub and len(pub) == 32
    # kid is the RFC 7638 thumbprint of the key.
    canonical = json.dumps({"crv": "Ed25519", "kty": "OKP", "x": k["x"]}, separators=(",", ":"), sort_keys=True)
    assert k["kid"] == b64(hashlib.sha256(canonical.encode()).digest())


def test_a_login_token_verifies_with_pyjwt_and_the_jwk_set(session, jwks):
    token = session["token"]
    header = jwt.get_unverified_header(token)
    assert header == {"alg": "EdDSA", "typ": "JWT", "kid": jwks["keys"][0]["kid"]}, header
    key = jwt.PyJWKSet.from_dict(jwks)[header["kid"]]
    claims = jwt.decode(token, key.key, algorithms=["EdDSA"], audience="quad", issuer="quad-accounts",
                        options={"require": ["iss", "aud", "sub", "iat", "exp", "jti"]})
    assert claims["sub"] == session["user"] and claims["role"] == session["role"] == "student"
    assert isinstance(claims["exp"], int) and isinstance(claims["iat"], int), "NumericDate: whole seconds"
    assert claims["exp"] * 1000 == session["expires_at"], (claims, session)
    assert 3600 <= claims["exp"] - claims["iat"] <= 3601, claims
    assert abs(claims["iat"] - time.time()) < 120, "iat in seconds, not ms"
    assert len(claims["jti"]) == 36 and claims["jti"][14] == "7", "a UUIDv7"
    # The same key through PyJWK, as the brief's foreign client would do it.
    assert jwt.decode(token, jwt.PyJWK(jwks["keys"][0]).key, algorithms=["EdDSA"], audience="quad")["sub"] == session["user"]
    # And a token whose aud is another service's does not verify for that service.
    with pytest.raises(jwt.InvalidAudienceError):
        jwt.decode(token, key.key, algorithms=["EdDSA"], audience="someone-else")


def test_the_broker_accepts_a_token_pyjwt_signs_with_accounts_key(stack, session, jwks, accounts_key):
    token = jwt.encode(claims_of(session, jti=quadclient.uuid7()), accounts_key, algorithm="EdDSA",
                       headers={"kid": jwks["keys"][0]["kid"]})
    answer = stack.client().call("accounts.profile.get", {}, token=token, timeout=30)
    assert error_code(answer) is None, answer
    assert body_of(answer)["user"] == session["user"]


def test_alg_none_is_refused(stack, session, jwks):
    kid = jwks["keys"][0]["kid"]
    for alg in ("none", "None", "NONE"):
        unsigned = compact({"alg": alg, "typ": "JWT", "kid": kid}) + "." + compact(claims_of(session, role="admin")) + "."
        assert refusal(stack, unsigned).startswith("token algorithm refused"), alg
    # The real token's signature on an alg none header: refused too.
    sig = session["token"].rsplit(".", 1)[1]
    forged = compact({"alg": "none", "kid": kid}) + "." + session["token"].split(".")[1] + "." + sig
    assert refusal(stack, forged).startswith("token algorithm refused")


def test_hs256_keyed_with_the_public_key_is_refused(stack, session, jwks):
    k = jwks["keys"][0]
    signed = compact({"alg": "HS256", "typ": "JWT", "kid": k["kid"]}) + "." + compact(claims_of(session, role="admin"))
    for secret in (unb64(k["x"]), k["x"].encode(), json.dumps(k).encode()):
        mac = hmac.new(secret, signed.encode(), hashlib.sha256).digest()
        message = refusal(stack, signed + "." + b64(mac))
        assert message.startswith("token algorithm refused") and "HS256" in message, message
    for alg in ("RS256", "ES256", "Ed25519", "eddsa"):
        other = compact({"alg": alg, "typ": "JWT", "kid": k["kid"]}) + "." + compact(claims_of(session)) + "." + session["token"].rsplit(".", 1)[1]
        assert refusal(stack, other).startswith("token algorithm refused"), alg


def test_a_wrong_or_missing_kid_is_refused(stack, session, accounts_key):
    # Signed by the right key, under a kid that is not its own.
    for kid in ("another-key", "", "x" * 40):
        token = jwt.encode(claims_of(session), accounts_key, algorithm="EdDSA", headers={"kid": kid})
        assert refusal(stack, token).startswith("token key unknown"), kid
    token = jwt.encode(claims_of(session), accounts_key, algorithm="EdDSA")
    assert refusal(stack, token).startswith("token key unknown")


def test_another_ed25519_keys_signature_is_refused(stack, session, jwks):
    other = ed25519.Ed25519PrivateKey.generate()
    claims = claims_of(session, role="admin")
    # Under the stack's kid: the signature does not verify.
    lying = jwt.encode(claims, other, algorithm="EdDSA", headers={"kid": jwks["keys"][0]["kid"]})
    assert refusal(stack, lying).startswith("token signature invalid")
    # Under its own kid: a key this stack does not know.
    own = jwt.PyJWK.from_dict({"kty": "OKP", "crv": "Ed25519", "x": b64(other.public_key().public_bytes_raw())})
    assert own.key is not None
    honest = jwt.encode(claims, other, algorithm="EdDSA", headers={"kid": "other-" + secrets.token_hex(8)})
    assert refusal(stack, honest).startswith("token key unknown")


def test_expired_wrong_audience_issuer_and_missing_claims_are_refused(stack, session, jwks, accounts_key):
    kid = jwks["keys"][0]["kid"]
    now = int(time.time())

    def signed(**changes):
        return jwt.encode(claims_of(session, **{"jti": quadclient.uuid7(), **changes}), accounts_key, algorithm="EdDSA", headers={"kid": kid})

    assert refusal(stack, signed(exp=now - 5, iat=now - 3605)).startswith("token expired")
    assert refusal(stack, signed(aud="someone-else")).startswith("token claim refused")
    assert refusal(stack, signed(aud=["a", "b"])).startswith("token claim refused")
    assert refusal(stack, signed(iss="evil-accounts")).startswith("token claim refused")
    assert refusal(stack, signed(nbf=now + 3600)).startswith("token claim refused")
    # exp in ms, as tokens had it before: not a NumericDate this verifier takes.
    assert refusal(stack, signed(exp=now * 1000 + 3_600_000)).startswith("token malformed")
    for claim in ("iss", "aud", "sub", "role", "iat", "exp", "jti"):
        message = refusal(stack, signed(**{claim: None}))
        assert message.startswith("token malformed") and f"claims.{claim}" in message, (claim, message)
    # The real token still works after all that.
    answer = stack.client().call("accounts.profile.get", {}, token=session["token"], timeout=30)
    assert error_code(answer) is None, answer


def test_garbled_and_old_format_tokens_are_refused(stack, session):
    token = session["token"]
    header, payload, sig = token.split(".")
    old = payload + "." + sig
    for bad in (old, header + "." + payload, token + ".x", "a.b.c", "!!." + payload + "." + sig, "x" * 5000):
        answer = stack.client().call("accounts.profile.get", {}, token=bad, timeout=30)
        assert answer is not None and error_code(answer) in ("unauthorized", "bad_request", "payload_too_large"), answer
        if error_code(answer) == "unauthorized":
            assert answer["body"]["message"].startswith("token "), answer
