import Foundation
import QuadAuth
import QuadContract
import QuadRuntime
import QuadStore
import QuadTestSupport
import QuadWire
import Testing
@testable import QuadAccounts

/// accounts' handlers on a fresh store: a SQLite file, or the test
/// PostgreSQL server (QUAD_TEST_PG) in a schema of its own.
func accounts(postgres: Bool = false, ttlMs: Int64 = 86_400_000) throws -> (Handlers, Database, SigningKey) {
    let db = try TestStore.open("accounts", migrations: Accounts.migrations, postgres: postgres)
    let key = SigningKey.generate()
    let h = Handlers(service: "accounts", instance: "accounts/test", db: db)
    Accounts.register(h, db: db, settings: try .init(signingKey: key, tokenTTLMillis: ttlMs, hashing: .minimum))
    return (h, db, key)
}

func ana(_ overrides: [String: JSON] = [:]) -> JSON {
    var body: [String: JSON] = [
        "email": "ana@uni.edu", "password": "correct horse", "name": "Ana Ruiz", "semester": 3, "categories": ["Tech", "Study"],
    ]
    for (k, v) in overrides { body[k] = v }
    return .object(body)
}

func refusal(_ body: () throws -> Any) -> QuadError? {
    do { _ = try body(); return nil } catch let e as QuadError { return e } catch { return .internal("\(error)") }
}

var stores: [Bool] { ProcessInfo.processInfo.environment["QUAD_TEST_PG"] == nil ? [false] : [false, true] }

@Suite("accounts handlers")
struct AccountsHandlerTests {
    @Test(arguments: stores)
    func registerThenLogInThenReadAndChangeTheProfile(postgres: Bool) throws {
        let (h, db, key) = try accounts(postgres: postgres)
        let made = try h.call("accounts.register", ana(["email": "Ana@UNI.edu"]))
        let user = try #require(made["user"]?.string)
        #expect(user.count == 36 && Array(user)[14] == "7", "a UUIDv7")
        #expect(made["email"]?.string == "ana@uni.edu")
        #expect(made["role"]?.string == "student")
        #expect(made["semester"]?.int == 3)
        #expect(made["categories"] == ["Tech", "Study"])
        #expect(made["password"] == nil && made["password_hash"] == nil)
        let stored = try #require(try db.queryOne("SELECT password_hash FROM users WHERE id = $1", .text(user)))
        #expect(stored.string("password_hash").hasPrefix("$argon2id$"))

        let before = Int64(Clock.nowMillis())
        let session = try h.call("accounts.login", ["email": "ANA@uni.edu", "password": "correct horse"])
        #expect(session["user"]?.string == user && session["role"]?.string == "student")
        let expires = try #require(session["expires_at"]?.int)
        #expect(expires >= before + 86_400_000 && expires <= Int64(Clock.nowMillis()) + 86_400_000 + 1000 && expires % 1000 == 0, "exp in whole seconds, rounded up")
        let claims = try key.verifyingKey.verify(try #require(session["token"]?.string))
        #expect(claims.user == user && claims.role == "student" && claims.expiresAt == expires)

        var profile = try #require(made.object)
        profile["token"] = nil
        profile["expires_at"] = nil
        #expect(profile.removeValue(forKey: "refresh_token")?.string?.hasPrefix("rt1.") == true, "a registration answers a refresh token")
        #expect(try h.call("accounts.profile.get", user: user) == .object(profile))
        let changed = try h.call("accounts.profile.update", ["semester": 4, "categories": ["Lab"], "name": "  Ana R.  "], user: user)
        #expect(changed["semester"]?.int == 4 && changed["categories"] == ["Lab"] && changed["name"]?.string == "Ana R.")
        #expect(try h.call("accounts.profile.get", user: user)["semester"]?.int == 4)

        // Events name the user, never the email or the password.
        let events = try #require(try h.call("accounts.events.since", ["after": 0])["events"]?.array)
        #expect(events.map { $0["type"]?.string } == ["accounts.user.registered", "accounts.user.updated"])
        #expect(events[0]["body"] == ["user": .string(user), "name": "Ana Ruiz", "semester": 3, "categories": ["Tech", "Study"]])
        #expect(events[1]["body"] == ["user": .string(user), "name": "Ana R.", "semester": 4, "categories": ["Lab"]])
        for e in events { #expect(!e.text.contains("ana@uni.edu") && !e.text.contains("correct horse") && !e.text.contains("argon2")) }
    }

    /// A phone that registers never logs in: the registration's reply is a
    /// session (a token signed for the new user, its expiry), which
    /// accounts.refresh renews like a login's.
    @Test(arguments: stores)
    func aRegistrationAnswersWithASessionThatRefreshRenews(postgres: Bool) throws {
        let (h, _, key) = try accounts(postgres: postgres, ttlMs: 3_600_000)
        let before = Int64(Clock.nowMillis())
        let made = try h.call("accounts.register", ana())
        let user = try #require(made["user"]?.string)
        let token = try #require(made["token"]?.string, "accounts.register answers with a token")
        let expires = try #require(made["expires_at"]?.int)
        #expect(expires >= before + 3_600_000 && expires <= Int64(Clock.nowMillis()) + 3_600_000 + 1000 && expires % 1000 == 0)
        let claims = try key.verifyingKey.verify(token)
        #expect(claims.user == user && claims.role == "student" && claims.expiresAt == expires && !claims.tokenID.isEmpty)
        let renewed = try h.call("accounts.refresh", ["token": .string(token)], user: user, role: "student")
        #expect(try key.verifyingKey.verify(try #require(renewed["token"]?.string)).user == user)
    }

    @Test(arguments: stores)
    func aSecondAccountWithTheSameEmailIs409WhateverTheCase(postgres: Bool) throws {
        let (h, _, _) = try accounts(postgres: postgres)
        _ = try h.call("accounts.register", ana())
        let e = refusal { try h.call("accounts.register", ana(["email": "ANA@uni.EDU", "name": "Other"])) }
        #expect(e?.status == 409 && e?.message == "an account with email 'ana@uni.edu' already exists")
    }

    @Test func theSameRegisterIDTwiceMakesOneAccountAndTheSameReply() throws {
        let (h, db, _) = try accounts()
        let id = MessageID.make()
        let first = try h.call("accounts.register", ana(), id: id)
        #expect(try h.call("accounts.register", ana(), id: id) == first)
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM users")?.int("n") == 1)
    }

    @Test func aWrongPasswordAndAnUnknownEmailGetTheSame401() throws {
        let (h, _, _) = try accounts()
        _ = try h.call("accounts.register", ana())
        let wrong = refusal { try h.call("accounts.login", ["email": "ana@uni.edu", "password": "wrong horse"]) }
        let unknown = refusal { try h.call("accounts.login", ["email": "bob@uni.edu", "password": "correct horse"]) }
        #expect(wrong?.status == 401 && wrong?.message == "wrong email or password")
        #expect(unknown?.status == 401 && unknown?.message == wrong?.message)
    }

    static let badRegistrations: [(String, JSON, String)] = [
        ("no email", ["password": "correct horse", "name": "A", "semester": 1], "body.email is required"),
        ("email not a string", ["email": 5, "password": "correct horse", "name": "A", "semester": 1], "body.email must be a string, got number"),
        ("no @", ana(["email": "ana.uni.edu"]), "body.email must be one address like name@campus.edu"),
        ("two @", ana(["email": "a@b@uni.edu"]), "body.email must be one address"),
        ("no domain dot", ana(["email": "ana@localhost"]), "body.email must be one address like name@campus.edu, got 'ana@localhost'"),
        ("space", ana(["email": "an a@uni.edu"]), "body.email must be one address like name@campus.edu"),
        ("double dot", ana(["email": "an..a@uni.edu"]), "body.email must be one address like name@campus.edu"),
        ("too long", ana(["email": .string(String(repeating: "a", count: 60) + "@" + String(repeating: "b", count: 190) + ".edu")]),
         "body.email must be 3 to 254 characters (max_email_length)"),
        ("short password", ana(["password": "1234567"]), "body.password must be at least 8 characters (min_password_length)"),
        ("long password", ana(["password": .string(String(repeating: "p", count: 129))]), "body.password must be at most 128 characters (max_password_length)"),
        ("blank name", ana(["name": "   "]), "body.name must not be empty"),
        ("only White_Space", ana(["name": "\u{2003}\u{A0}\u{3000}"]), "body.name must not be empty"),
        ("a control character inside", ana(["name": "Ana\u{07}Ruiz"]), "body.name must not contain U+0007 (a control character)"),
        ("a line break", ana(["name": "Ana\nRuiz"]), "body.name must not contain U+000A (a line break: this field is one line)"),
        ("a bidi override", ana(["name": "Ana \u{202E}ziuR"]), "body.name must not contain U+202E (a bidirectional control"),
        ("long name", ana(["name": .string(String(repeating: "n", count: 101))]), "body.name must be 1 to 100 characters (max_name_length)"),
        ("no semester", ["email": "a@uni.edu", "password": "correct horse", "name": "A"], "body.semester is required"),
        ("semester 0", ana(["semester": 0]), "body.semester must be between 1 and 12"),
        ("semester 13", ana(["semester": 13]), "body.semester must be between 1 and 12"),
        ("semester text", ana(["semester": "2026-1"]), "body.semester must be an integer, got string"),
        ("unknown category", ana(["categories": ["Tech", "Cars"]]), "body.categories[1] must be one of Study, Tech, Creative, Lab, Personal, Others, got 'Cars'"),
        ("repeated category", ana(["categories": ["Tech", "Tech"]]), "body.categories[1] repeats an earlier item"),
        ("categories not a list", ana(["categories": "Tech"]), "body.categories must be an array"),
        ("a role", ana(["role": "admin"]), "body.role is not a field of accounts.register"),
        ("unknown field", ana(["nickname": "x"]), "body.nickname is not a field of accounts.register"),
    ]

    @Test(arguments: badRegistrations)
    func aBadRegistrationIs400NamingTheFieldAndLimit(why: String, body: JSON, message: String) throws {
        let (h, db, _) = try accounts()
        let e = refusal { try h.call("accounts.register", body) }
        #expect(e?.status == 400, "\(why)")
        #expect(e?.message.hasPrefix(message) == true, "\(why): \(e?.message ?? "accepted")")
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM users")?.int("n") == 0)
    }

    /// What accounts writes is its contract's types: the two profile
    /// events share one body, and a revocation is the same type as an
    /// event, as a logout's reply and as an entry of accounts.revocations.
    @Test func repliesAndEventsAreTheContractTypes() throws {
        typealias C = Contract.Accounts
        let (h, _, _) = try accounts()
        let made = try C.Registered(json: try h.call("accounts.register", ana()))
        #expect(made.semester == 3 && made.categories == ["Tech", "Study"] && made.role == "student" && !made.token.isEmpty)
        let updated = try C.Profile(json: try h.call("accounts.profile.update", ["name": " Ana R.\u{3000}"], user: made.user))
        #expect(updated.name == "Ana R." && updated.email == "ana@uni.edu")
        let ended = try C.Revocation(json: try h.call("accounts.logout", ["token": .string(made.token)], user: made.user))
        #expect(ended.user == made.user && ended.jti != nil && ended.beforeMs == nil)
        let listed = try C.RevocationList(json: try h.call("accounts.revocations", role: "service"))
        #expect(listed.revocations == [ended])

        let events = try #require(try h.call("accounts.events.since", ["after": 0])["events"]?.array)
        #expect(events.map { $0["type"]?.string } == ["accounts.user.registered", "accounts.user.updated", "accounts.session.revoked"])
        #expect(try C.PublicProfile(json: events[0]["body"] ?? .null) == .init(user: made.user, name: "Ana Ruiz", semester: 3, categories: ["Tech", "Study"]))
        #expect(try C.PublicProfile(json: events[1]["body"] ?? .null) == .init(updated))
        #expect(try C.Revocation(json: events[2]["body"] ?? .null) == ended)
        #expect(C.userRegistered.event.body.schema["properties"] == C.userUpdated.event.body.schema["properties"])
        for e in events {
            let declared = try #require(Contract.event(e["type"]?.string ?? ""))
            #expect(Validator.contract.failure(of: e["body"] ?? .null, against: declared.body, in: declared.path) == nil, "\(e.text)")
        }
    }

    /// The admin account's flags are checked by the contract's own email
    /// and password rules, as a registration's fields are.
    @Test func adminFlagsFollowTheContractsRules() throws {
        #expect(try Validation.flag("Admin@Quad.Campus", "email", field: "email") == "Admin@Quad.Campus")
        #expect(refusal { try Validation.flag("admin@localhost", "email", field: "email") }?.message
                == "email must be one address like name@campus.edu, got 'admin@localhost'")
        #expect(refusal { try Validation.flag("short", "password", field: "password") }?.message
                == "password must be at least 8 characters (min_password_length)")
        #expect(try Validation.flag("long enough", "password", field: "password") == "long enough")
    }

    @Test func theProfileIsOnlyEverOnesOwn() throws {
        let (h, _, _) = try accounts()
        let a = try #require(try h.call("accounts.register", ana())["user"]?.string)
        let b = try #require(try h.call("accounts.register", ana(["email": "bob@uni.edu", "name": "Bob"]))["user"]?.string)
        #expect(refusal { try h.call("accounts.profile.get") }?.status == 401)
        #expect(refusal { try h.call("accounts.profile.update", ["semester": 5]) }?.status == 401)
        #expect(refusal { try h.call("accounts.profile.get", ["user": .string(a)], user: b) }?.status == 403)
        #expect(refusal { try h.call("accounts.profile.update", ["user": .string(a), "semester": 5], user: b) }?.status == 403)
        #expect(try h.call("accounts.profile.get", ["user": .string(b)], user: b)["name"]?.string == "Bob")
        #expect(try h.call("accounts.profile.get", user: a)["semester"]?.int == 3, "a's profile unchanged")
    }

    @Test func changingThePasswordNeedsTheCurrentOne() throws {
        let (h, _, _) = try accounts()
        let a = try #require(try h.call("accounts.register", ana())["user"]?.string)
        #expect(refusal { try h.call("accounts.profile.update", ["password": "new password!"], user: a) }?.message
                == "body.current_password is required with body.password")
        #expect(refusal { try h.call("accounts.profile.update", ["password": "new password!", "current_password": "nope nope"], user: a) }?.status == 403)
        #expect(refusal { try h.call("accounts.profile.update", ["password": "short", "current_password": "correct horse"], user: a) }?.status == 400)
        #expect(refusal { try h.call("accounts.profile.update", ["email": "x@uni.edu"], user: a) }?.message.hasPrefix("body.email is not a field of accounts.profile.update") == true)
        #expect(refusal { try h.call("accounts.profile.update", [:], user: a) }?.status == 400)
        _ = try h.call("accounts.profile.update", ["password": "new password!", "current_password": "correct horse"], user: a)
        #expect(refusal { try h.call("accounts.login", ["email": "ana@uni.edu", "password": "correct horse"]) }?.status == 401)
        #expect(try h.call("accounts.login", ["email": "ana@uni.edu", "password": "new password!"])["user"]?.string == a)
        // A password change publishes no profile event, only the end of the earlier sessions.
        let events = try #require(try h.call("accounts.events.since", ["after": 0])["events"]?.array)
        #expect(events.map { $0["type"]?.string } == ["accounts.user.registered", "accounts.session.revoked"])
    }

    @Test func theAdminIsCreatedOnceAndItsChangedPasswordIsNeverReset() throws {
        let (h, db, key) = try accounts()
        #expect(try Accounts.ensureAdmin(db, email: "admin@quad.campus", password: "first admin pass", hashing: .minimum) == .created)
        #expect(try Accounts.ensureAdmin(db, email: "admin@quad.campus", password: "first admin pass", hashing: .minimum) == .unchanged)
        let session = try h.call("accounts.login", ["email": "admin@quad.campus", "password": "first admin pass"])
        #expect(session["role"]?.string == "admin")
        #expect(try key.verifyingKey.verify(session["token"]!.string!).role == "admin")
        let admin = try #require(session["user"]?.string)
        let profile = try h.call("accounts.profile.get", user: admin)
        #expect(profile["semester"] == .null && profile["role"]?.string == "admin")
        // The admin changes the password; the next start does not put the first one back.
        _ = try h.call("accounts.profile.update", ["password": "changed admin pass", "current_password": "first admin pass"], user: admin, role: "admin")
        #expect(try Accounts.ensureAdmin(db, email: "admin@quad.campus", password: "first admin pass", hashing: .minimum) == .unchanged)
        #expect(refusal { try h.call("accounts.login", ["email": "admin@quad.campus", "password": "first admin pass"]) }?.status == 401)
        #expect(try h.call("accounts.login", ["email": "admin@quad.campus", "password": "changed admin pass"])["user"]?.string == admin)
        // An existing student is promoted, keeps its password, and its
        // student tokens end (a role change).
        let a = try #require(try h.call("accounts.register", ana())["user"]?.string)
        let student = try #require(try h.call("accounts.login", ["email": "ana@uni.edu", "password": "correct horse"])["token"]?.string)
        usleep(2_000)  // tokens signed before the promotion's millisecond end
        #expect(try Accounts.ensureAdmin(db, email: "ana@uni.edu", password: "admin password", hashing: .minimum) == .promoted)
        let promoted = try h.call("accounts.login", ["email": "ana@uni.edu", "password": "correct horse"])
        #expect(promoted["user"]?.string == a && promoted["role"]?.string == "admin")
        #expect(refusal { try h.call("accounts.refresh", ["token": .string(student)], user: a, role: "student") }?.status == 401)
        #expect(try db.queryOne("SELECT COUNT(*) AS n FROM users")?.int("n") == 2)
    }
}
