# One-time bootstrap: protos/*.json (hand-written) -> Swift Shape declarations.
import json, pathlib, re, sys
ROOT = pathlib.Path(sys.argv[1]); OUT = pathlib.Path(sys.argv[2])
P = ROOT / "protos"
MUT = set("""accounts.register accounts.profile.update accounts.logout accounts.refresh catalog.stock.adjust catalog.stock.confirm
catalog.stock.hold catalog.stock.release favorites.add favorites.remove orders.cart.add orders.cart.clear orders.cart.remove orders.cart.set
orders.place orders.cancel reservations.cancel reservations.car.save reservations.checkin reservations.checkout reservations.hold telemetry.ingest""".split())
SERVICE_AUTH = {"catalog.stock.hold","catalog.stock.confirm","catalog.stock.release","catalog.stock.get","telemetry.raw.since","telemetry.stats","accounts.revocations"}
SCHEMA_KW = {"items","not","if","then","else","additionalProperties","propertyNames","contains"}
LIST_KW = {"oneOf","anyOf","allOf","prefixItems"}

def lit(v, ind):
    if v is None: return "nil"
    if v is True: return "true"
    if v is False: return "false"
    if isinstance(v, int): return str(v)
    if isinstance(v, float): return repr(v)
    if isinstance(v, str): return swift_str(v)
    if isinstance(v, list): return "[" + ", ".join(lit(x, ind) for x in v) + "]"
    if isinstance(v, dict):
        if not v: return "[:]"
        return "[" + ", ".join(f"{swift_str(k)}: {lit(x, ind)}" for k, x in v.items()) + "]"

def swift_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'

def num(v):
    return str(v)

def shape(node, ind=1):
    pad = "    " * ind
    if node is True or node == {}: return ".any"
    if node is False: return ".not(.any)"
    n = dict(node)
    for k in ("$schema", "$id", "title"): n.pop(k, None)
    t = n.pop("type", None)
    base = None
    extra_types = None
    if isinstance(t, list):
        nonnull = [x for x in t if x != "null"]
        if len(nonnull) == 1:
            t1 = nonnull[0]; nullable = "null" in t
        else:
            t1 = None; extra_types = t
    else:
        t1 = t; nullable = False
    if t1 == "object":
        props = n.pop("properties", {}); req = n.pop("required", []); ap = n.pop("additionalProperties", None)
        missing = [r for r in req if r not in props]
        fields = []
        for k, v in props.items():
            s = shape(v, ind + 1)
            if k not in req: s += ".optional"
            fields.append(f"{pad}    {swift_str(k)}: {s},")
        body = ("[\n" + "\n".join(fields) + f"\n{pad}]") if fields else ""
        if ap is False:
            base = f".object({body})"
        elif ap is None or ap is True:
            base = f".object({body + ', ' if body else ''}open: true)"
        else:
            base = f".map(of: {shape(ap, ind + 1)}{', ' + body if body else ''})"
        if missing: n["required"] = missing; base += ".keyword(\"required\", json: " + lit(missing, ind) + ")"; n.pop("required")
    elif t1 == "string":
        args = []
        mn = n.pop("minLength", None); mx = n.pop("maxLength", None)
        if mn is not None and mx is not None: args.append(f"{mn}...{mx}")
        elif mx is not None: args.append(f"max: {mx}")
        elif mn is not None: args.append(f"min: {mn}")
        if "pattern" in n: args.append("pattern: " + swift_str(n.pop("pattern")))
        if "format" in n: args.append("format: " + swift_str(n.pop("format")))
        base = f".string({', '.join(args)})"
    elif t1 == "integer":
        mn = n.pop("minimum", None); mx = n.pop("maximum", None); d = n.pop("default", None)
        args = []
        if mn is not None and mx is not None and isinstance(mn, int) and isinstance(mx, int): args.append(f"{mn}...{mx}")
        else:
            if mn is not None: args.append(f"min: {int(mn)}")
            if mx is not None: args.append(f"max: {int(mx)}")
        if isinstance(d, int) and not isinstance(d, bool): args.append(f"default: {d}")
        elif d is not None: n["default"] = d
        base = f".int({', '.join(args)})"
    elif t1 == "number":
        args = []
        if "minimum" in n: args.append(f"min: {num(n.pop('minimum'))}")
        if "maximum" in n: args.append(f"max: {num(n.pop('maximum'))}")
        base = f".number({', '.join(args)})"
    elif t1 == "boolean": base = ".bool"
    elif t1 == "null": base = ".null"
    elif t1 == "array":
        items = n.pop("items", None)
        args = [f"of: {shape(items, ind + 1) if items is not None else '.any'}"]
        if "minItems" in n: args.append(f"min: {n.pop('minItems')}")
        if "maxItems" in n: args.append(f"max: {n.pop('maxItems')}")
        base = f".array({', '.join(args)})"
    elif t1 is None:
        if "$ref" in n: base = f".ref({swift_str(n.pop('$ref'))})"
        elif "enum" in n:
            e = n.pop("enum")
            base = f".choice({lit(e, ind)})" if all(isinstance(x, str) for x in e) else f".choice(values: {lit(e, ind)})"
        elif "const" in n: base = f".const({lit(n.pop('const'), ind)})"
        elif "oneOf" in n or "anyOf" in n:
            kw = "oneOf" if "oneOf" in n else "anyOf"
            base = f".{kw}([\n" + "".join(f"{pad}    {shape(x, ind + 1)},\n" for x in n.pop(kw)) + f"{pad}])"
        elif "allOf" in n:
            base = ".allOf([\n" + "".join(f"{pad}    {shape(x, ind + 1)},\n" for x in n.pop("allOf")) + f"{pad}])"
        elif "if" in n:
            c = n.pop("if"); th = n.pop("then", {}); el = n.pop("else", None)
            base = f".when({shape(c, ind + 1)}, then: {shape(th, ind + 1)}" + (f", otherwise: {shape(el, ind + 1)}" if el is not None else "") + ")"
        elif "not" in n: base = f".not({shape(n.pop('not'), ind + 1)})"
        else: base = ".any"
    if extra_types: base += f".types({lit(extra_types, ind)})"
    elif t1 is not None and nullable: base += ".nullable"
    out = base
    for k, v in n.items():
        if k == "description": out += f"\n{pad}    .described({swift_str(v)})"
        elif k == "default": out += f".default({lit(v, ind)})"
        elif k == "$defs":
            out += f"\n{pad}    .definitions([\n" + "".join(f"{pad}        {swift_str(dk)}: {shape(dv, ind + 2)},\n" for dk, dv in v.items()) + f"{pad}    ])"
        elif k == "allOf":
            out += f"\n{pad}    .and(\n" + ",\n".join(f"{pad}        {shape(x, ind + 2)}" for x in v) + f"\n{pad}    )"
        elif k in LIST_KW:
            out += f"\n{pad}    .keyword({swift_str(k)}, [\n" + "".join(f"{pad}        {shape(x, ind + 2)},\n" for x in v) + f"{pad}    ])"
        elif k in SCHEMA_KW:
            out += f".keyword({swift_str(k)}, {shape(v, ind + 1)})"
        elif k == "x-quad-auth": pass
        else: out += f".keyword({swift_str(k)}, json: {lit(v, ind)})"
    return out

def ident(s):
    parts = re.split(r"[.\-_]", s)
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])

services = {}
for p in sorted(P.rglob("*.json")):
    rel = p.relative_to(P).as_posix()
    if rel.startswith("examples/"): continue
    folder = rel.split("/")[0] if "/" in rel else ""
    services.setdefault(folder, []).append((rel, json.loads(p.read_text())))

for folder, files in services.items():
    name = folder or "wire"
    Enum = {"wire": "Wire", "sys": "BrokerSys", "common": "Common"}.get(name, name[:1].upper() + name[1:])
    ops = {}; events = []; defs = []
    for rel, s in files:
        fn = rel.split("/", 1)[1] if "/" in rel else rel
        if fn.endswith(".request.json") or fn.endswith(".reply.json"):
            op, kind = fn.rsplit(".", 2)[0], fn.rsplit(".", 2)[1]
            ops.setdefault(op, {})[kind] = s
        elif fn.endswith(".event.json"):
            events.append((fn[: -len(".event.json")], s))
        else:
            defs.append((rel, s))
    lines = [f"extension {Enum} {{"]
    names = []
    for op, pair in ops.items():
        typ = f"{folder}.{op}" if folder not in ("common",) else f"<service>.{op}"
        req, rep = pair.get("request"), pair.get("reply")
        auth = (req or {}).get("x-quad-auth")
        full = f"{folder}.{op}"
        if full in SERVICE_AUTH: auth = "service"
        kind = "mutation" if full in MUT else "query"
        v = ident(op); names.append(v)
        title = (req or rep or {}).get("title", "")
        lines.append(f"    public static let {v} = Operation(")
        lines.append(f"        {swift_str(op if folder == 'common' else full)}, .{kind}, auth: .{auth or 'none'},")
        lines.append(f"        request: {shape(req, 2) if req else '.object()'},")
        lines.append(f"        reply: {shape(rep, 2) if rep else '.any'})")
        lines.append("")
    evnames = []
    for ev, s in events:
        v = ident(ev); v = v + "Event" if v in names else v; evnames.append(v)
        lines.append(f"    public static let {v} = Event({swift_str(folder + '.' + ev)}, body: {shape(s, 2)})")
        lines.append("")
    defnames = []
    for rel, s in defs:
        base = rel.split("/")[-1].replace(".schema.json", "")
        v = ident(rel.replace("/", ".").replace(".schema.json", "").replace(folder + ".", "", 1) if folder else base) + "Schema"
        v = v[0].lower() + v[1:]
        defnames.append(v)
        lines.append(f"    public static let {v} = Definition({swift_str(rel)}, title: {swift_str(s.get('title', base))}, {shape(s, 2)})")
        lines.append("")
    if names: lines.append(f"    public static let operations: [Operation] = [{', '.join(names)}]")
    if evnames: lines.append(f"    public static let events: [Event] = [{', '.join(evnames)}]")
    if defnames: lines.append(f"    public static let definitions: [Definition] = [{', '.join(defnames)}]")
    lines.append("}")
    (OUT / f"{Enum}.swift").write_text(f"import QuadWire\n\n/// The {name} part of the contract.\npublic enum {Enum} {{}}\n\n" + "\n".join(lines) + "\n")
    print(Enum, len(names), len(evnames), len(defnames))
