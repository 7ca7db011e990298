#!/usr/bin/env python3
"""Generates topdown-tma/src/generated.rs from the metric data in data/: Linux
perf's pmu-events metric JSON (linux-pmu-events), Intel's perfmon metric JSON and Intel's Atom /
E-core TMA CSV files (intel-perfmon). For each supported model, the TopDown Level 1 and Level 2
metrics (and every metric they reference) transpiled to Rust, their thresholds, and the events
they read, named as perf names them.

Intel's perfmon metric JSON writes a formula over aliases (`100 * ( a / ( a + b ) )`) with the
events behind each alias (`TOPDOWN.SLOTS:perf_metrics`, `INT_MISC.RECOVERY_CYCLES:c1:e1`) and
constants (`smt_on`); thresholds are formulas over other metrics' legacy names. They are turned
into perf's spelling as perf's converter does: `PERF_METRICS.FRONTEND_BOUND` is `topdown-fe-bound`,
`:perf_metrics` is dropped, `:cN`/`:eN`/`:iN` are `cpu@EVENT,cmask=N,edge,inv@`, `smt_on` is
`#smt_on`. Metrics are generated as fractions: thresholds over percent values (`a > 15`) see
each metric times 100; E-core thresholds (`metric_TMA_X(%) >0.20`) compare fractions, and see
it as it is (perf's E-core metrics are fractions with `> 0.2` thresholds).

    python3 xtask/gen/tma_formulas.py [DATA_DIR] > topdown-tma/src/generated.rs

The output is checked in; `tma_formulas_are_generated_from_the_data` (tests/) regenerates it
and fails if it differs. An independent interpreter in the tests evaluates the same JSON strings
and checks the generated code against it.
"""
import csv
import json
import os
import re
import sys

DATA = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "../../data/linux-pmu-events")

# Our node names (perf's Intel metric names) for each model's L1/L2 metrics.
AMD = {
    "frontend_bound": "tma_frontend_bound", "bad_speculation": "tma_bad_speculation",
    "backend_bound": "tma_backend_bound", "retiring": "tma_retiring",
    "smt_contention": "tma_smt_contention",
}
ZEN4 = dict(AMD, **{
    "frontend_bound_latency": "tma_fetch_latency", "frontend_bound_bandwidth": "tma_fetch_bandwidth",
    "bad_speculation_mispredicts": "tma_branch_mispredicts",
    "bad_speculation_pipeline_restarts": "tma_machine_clears",
    "backend_bound_memory": "tma_memory_bound", "backend_bound_cpu": "tma_core_bound",
    "retiring_fastpath": "tma_light_operations", "retiring_microcode": "tma_heavy_operations",
})
ZEN5 = dict(AMD, **{
    "frontend_bound_by_latency": "tma_fetch_latency",
    "frontend_bound_by_bandwidth": "tma_fetch_bandwidth",
    "bad_speculation_from_mispredicts": "tma_branch_mispredicts",
    "bad_speculation_from_pipeline_restarts": "tma_machine_clears",
    "backend_bound_by_memory": "tma_memory_bound", "backend_bound_by_cpu": "tma_core_bound",
    "retiring_from_fastpath": "tma_light_operations",
    "retiring_from_microcode": "tma_heavy_operations",
})
SKL = {"Frontend_Bound": "tma_frontend_bound", "Bad_Speculation": "tma_bad_speculation",
       "Backend_Bound": "tma_backend_bound", "Retiring": "tma_retiring"}
SKL_SMT = {k + "_SMT": v for k, v in SKL.items()}
ATOM = {"Frontend_Bound": "tma_frontend_bound", "Fetch_Latency": "tma_fetch_latency",
        "Fetch_Bandwidth": "tma_fetch_bandwidth", "Bad_Speculation": "tma_bad_speculation",
        "Branch_Mispredicts": "tma_branch_mispredicts", "Machine_Clears": "tma_machine_clears",
        "Backend_Bound": "tma_backend_bound", "Core_Bound": "tma_core_bound",
        "Memory_Bound": "tma_memory_bound", "Backend_Bound_Aux": "tma_backend_bound_aux",
        "Resource_Bound": "tma_resource_bound", "Retiring": "tma_retiring", "Base": "tma_base",
        "MS_uops": "tma_ms_uops"}
# Intel perfmon metric names (P-cores, and E-cores from Sierra Forest on) -> nodes.
PERFMON = {"Frontend_Bound": "tma_frontend_bound", "Fetch_Latency": "tma_fetch_latency",
           "Fetch_Bandwidth": "tma_fetch_bandwidth", "Bad_Speculation": "tma_bad_speculation",
           "Branch_Mispredicts": "tma_branch_mispredicts",
           "Machine_Clears": "tma_machine_clears", "Backend_Bound": "tma_backend_bound",
           "Memory_Bound": "tma_memory_bound", "Core_Bound": "tma_core_bound",
           "Retiring": "tma_retiring", "Light_Operations": "tma_light_operations",
           "Heavy_Operations": "tma_heavy_operations",
           "IFetch_Latency": "tma_fetch_latency", "IFetch_Bandwidth": "tma_fetch_bandwidth",
           "Resource_Bound": "tma_resource_bound"}
ARM = {"frontend_bound": "tma_frontend_bound", "bad_speculation": "tma_bad_speculation",
       "backend_bound": "tma_backend_bound", "retiring": "tma_retiring"}

# name, description, metric files (later ones override by ArchStdEvent), unit filter,
# {source metric -> node} (None: every TopdownL1/L2 metric keeps its tma_ name).
MODELS = [
    ("icelake", "Intel Ice Lake / Tiger Lake (PERF_METRICS L1, generic-counter L2)",
     ["x86/icelake/icl-metrics.json"], None, None),
    ("sapphirerapids", "Intel Sapphire Rapids and later (PERF_METRICS L1 and L2)",
     ["x86/sapphirerapids/spr-metrics.json"], None, None),
    ("alderlake_core", "Intel Alder Lake P-core, cpu_core (PERF_METRICS L1 and L2)",
     ["x86-perf/alderlake/adl-metrics.json"], "cpu_core", None),
    ("alderlake_atom", "Intel Alder Lake E-core, cpu_atom (Gracemont, width 5)",
     ["x86-perf/alderlake/adl-metrics.json"], "cpu_atom", None),
    ("skylake", "Intel Skylake-class, SMT off (generic counters, width 4)",
     ["x86/skylake/skl-metrics.json"], None, SKL),
    ("skylake_smt", "Intel Skylake-class, SMT on: per-core inputs (per-core mode only)",
     ["x86/skylake/skl-metrics.json"], None, SKL_SMT),
    ("zen4", "AMD Zen 4 (pipeline utilization, width 6)",
     ["x86/amdzen4/pipeline.json"], None, ZEN4),
    ("zen5", "AMD Zen 5 (pipeline utilization, width 8)",
     ["x86/amdzen5/pipeline.json"], None, ZEN5),
    ("goldmont", "Intel Goldmont / Goldmont Plus (width 3, Level 1)",
     ["../intel-perfmon/Atom_TMA.csv"], "GLM/GLP", ATOM),
    ("tremont", "Intel Tremont (width 4)",
     ["../intel-perfmon/Atom_TMA.csv"], "TNT", ATOM),
    ("neoverse_v1", "Arm Neoverse V1 (STALL_SLOT based, 8 slots)",
     ["arm64/sbsa.json", "arm64/arm/neoverse-v1/metrics.json"], None, ARM),
    ("neoverse_n2", "Arm Neoverse N2 / V2 (STALL_SLOT based, slots from caps/slots)",
     ["arm64/sbsa.json", "arm64/arm/neoverse-n2-v2/metrics.json"], None, ARM),
    ("neoverse_v3", "Arm Neoverse V3 (STALL_SLOT based, slots from caps/slots, Level 1)",
     ["arm64/sbsa.json", "arm64/arm/neoverse-v3/metrics.json"], None, ARM),
    ("neoverse_n3", "Arm Neoverse N3 (STALL_SLOT based, slots from caps/slots, Level 1)",
     ["arm64/sbsa.json", "arm64/arm/neoverse-n3/metrics.json"], None, ARM),
] + [
    # perf's own metric files (what `perf stat -M TopdownL1,TopdownL2,TopdownL3` evaluates),
    # for every model perf has one: every tma_ metric of TopdownL1-L3 keeps its name.
    (name, doc, [f"x86-perf/{path}"], unit, None) for name, doc, path, unit in [
        ("icelakex", "Intel Ice Lake-SP (PERF_METRICS L1, generic-counter L2)",
         "icelakex/icx-metrics.json", None),
        ("tigerlake", "Intel Tiger Lake (PERF_METRICS L1, generic-counter L2)",
         "tigerlake/tgl-metrics.json", None),
        ("rocketlake", "Intel Rocket Lake (PERF_METRICS L1, generic-counter L2)",
         "rocketlake/rkl-metrics.json", None),
        ("emeraldrapids", "Intel Emerald Rapids (PERF_METRICS L1 and L2)",
         "emeraldrapids/emr-metrics.json", None),
        ("graniterapids", "Intel Granite Rapids (PERF_METRICS L1 and L2)",
         "graniterapids/gnr-metrics.json", None),
        ("meteorlake_core", "Intel Meteor Lake P-core, cpu_core (Redwood Cove; PERF_METRICS)",
         "meteorlake/mtl-metrics.json", "cpu_core"),
        ("lunarlake_core", "Intel Lunar Lake P-core, cpu_core (Lion Cove; PERF_METRICS)",
         "lunarlake/lnl-metrics.json", "cpu_core"),
        ("arrowlake_core", "Intel Arrow Lake P-core, cpu_core (Lion Cove; PERF_METRICS)",
         "arrowlake/arl-metrics.json", "cpu_core"),
        ("skylakex", "Intel Skylake-SP (generic counters, width 4; SMT on: perf's per-thread "
         "estimate)", "skylakex/skx-metrics.json", None),
        ("cascadelakex", "Intel Cascade Lake (generic counters, width 4; SMT on: perf's "
         "per-thread estimate)", "cascadelakex/clx-metrics.json", None),
        ("haswell", "Intel Haswell (generic counters, width 4; SMT on: perf's per-thread "
         "estimate)", "haswell/hsw-metrics.json", None),
        ("broadwell", "Intel Broadwell (generic counters, width 4; SMT on: perf's per-thread "
         "estimate)", "broadwell/bdw-metrics.json", None),
        ("sierraforest", "Intel Sierra Forest (Crestmont E-cores, width 6)",
         "sierraforest/srf-metrics.json", None),
        ("grandridge", "Intel Grand Ridge (Crestmont E-cores, width 6)",
         "grandridge/grr-metrics.json", None),
        ("crestmont", "Intel Crestmont E-core, cpu_atom (Meteor Lake; width 6)",
         "meteorlake/mtl-metrics.json", "cpu_atom"),
        ("lunarlake_atom", "Intel Lunar Lake E-core, cpu_atom (Skymont; width 8)",
         "lunarlake/lnl-metrics.json", "cpu_atom"),
        ("arrowlake_atom", "Intel Arrow Lake E-core, cpu_atom (Skymont; width 8)",
         "arrowlake/arl-metrics.json", "cpu_atom"),
    ]
] + [
    # Intel's perfmon metric files, where perf has none.
    (name, doc, [f"../intel-perfmon/{path}"], None, PERFMON) for name, doc, path in [
        ("haswellx", "Intel Haswell-EP (generic counters, width 4, SMT from #smt_on)",
         "HSX/metrics/haswellx_metrics.json"),
        ("broadwellx", "Intel Broadwell-EP (generic counters, width 4, SMT from #smt_on)",
         "BDX/metrics/broadwellx_metrics.json"),
    ]
]

# --- perf metric expressions: tokens and a precedence-climbing parser -----------------------
TOKEN = re.compile(r"\s*(?:(?P<num>(?:\d+\.?\d*|\.\d+)(?:e-?\d+)?(?![\w.@:?\\]))"
                   r"|(?P<sym>(?:\\[-,=]|[0-9a-zA-Z_.:@?#])+)|(?P<op>[-+*/%()<>&|^,]))")
BINARY = {"|": 1, "^": 2, "&": 3, "<": 4, ">": 4, "+": 5, "-": 5, "*": 6, "/": 6, "%": 6}


def tokenize(text):
    pos, out = 0, []
    text = text.strip()
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"cannot tokenize at {text[pos:]!r}")
        pos = m.end()
        if m.group("num"):
            out.append(("num", float(m.group("num"))))
        elif m.group("sym"):
            sym = m.group("sym").replace("\\", "")
            out.append(("kw", sym) if sym in ("if", "else") else ("sym", sym))
        else:
            out.append(("op", m.group("op")))
    return out


class Parser:
    def __init__(self, tokens):
        self.t, self.i = tokens, 0

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else (None, None)

    def take(self, kind=None, value=None):
        tok = self.peek()
        if (kind and tok[0] != kind) or (value is not None and tok[1] != value):
            raise ValueError(f"expected {value or kind}, got {tok}")
        self.i += 1
        return tok

    def expr(self):  # lowest: X if C else Y
        value = self.binary(1)
        if self.peek() == ("kw", "if"):
            self.take()
            cond = self.binary(1)
            self.take("kw", "else")
            other = self.expr()
            return ("if", cond, value, other)
        return value

    def binary(self, level):
        left = self.unary()
        while True:
            kind, op = self.peek()
            if kind != "op" or op not in BINARY or BINARY[op] < level:
                return left
            self.take()
            right = self.binary(BINARY[op] + 1)
            left = ("bin", op, left, right)

    def unary(self):
        kind, value = self.peek()
        if (kind, value) == ("op", "-"):
            self.take()
            return ("neg", self.unary())
        if (kind, value) == ("op", "("):
            self.take()
            inner = self.expr()
            self.take("op", ")")
            return inner
        if kind == "num":
            self.take()
            return ("num", value)
        if kind == "sym":
            self.take()
            if self.peek() == ("op", "(") and value in ("d_ratio", "min", "max"):
                self.take()
                a = self.expr()
                self.take("op", ",")
                b = self.expr()
                self.take("op", ")")
                return ("call", value, a, b)
            return ("sym", value)
        raise ValueError(f"unexpected {kind} {value}")


def parse(text):
    p = Parser(tokenize(text))
    tree = p.expr()
    if p.i != len(p.t):
        raise ValueError(f"trailing tokens in {text!r}")
    return tree


# --- metrics of a model ------------------------------------------------------------------------
def load_atom_csv(path, column):
    """Intel's Atom_TMA.csv and E-core_TMA_Metrics.csv as metrics: the model column's formula
    (an empty cell inherits from the nearest filled cell to its right), the `Aux` names
    (`#Pipeline_Width`, and the E-core file's `#SLOTS`, `#CLKS`) substituted, `>0.20`
    thresholds, `& P` adding the parent's own threshold."""
    rows = list(csv.reader(open(path, encoding="utf-8-sig")))
    header = rows[2]
    levels = [h for h in header if re.fullmatch(r"Level\d", h)]
    models = header[header.index(levels[-1]) + 1:header.index("Locate-with")]
    cells = [dict(zip(header, r)) for r in rows[3:]]
    def formula(d):
        for m in models[models.index(column):]:
            if d.get(m, "").strip():
                return d[m].strip()
        return ""
    aux = {d["Level1"]: formula(d) for d in cells
           if d["Level1"].startswith("#") and formula(d)}
    def substituted(expr):
        for _ in range(8):
            expr = re.sub(r"#\w+", lambda m: f"( {aux[m.group(0)]} )" if m.group(0) in aux
                          else m.group(0), expr)
        return expr
    metrics, parents, parent = {}, {}, {}
    for d in cells:
        at = next((l for l in levels if d[l]), None)
        name = d[at] if at else ""
        expr = formula(d)
        if at == "Level1":
            parent[1] = name
        elif at:
            parent[int(at[-1])] = name
            parents[name] = parent.get(int(at[-1]) - 1)
        if not name or not expr or name.startswith("#") or expr == "#NA":
            continue
        metrics[name] = {"MetricExpr": substituted(expr)}
        metrics[name]["_threshold"] = d.get("Threshold", "").strip()
    for name, m in metrics.items():
        threshold = m.pop("_threshold")
        rule = re.fullmatch(r">\s*([0-9.]+)(\s*&\s*P)?", threshold)
        if not rule:
            continue
        m["MetricThreshold"] = f"{name} > {rule.group(1)}"
        if rule.group(2) and parents.get(name) in metrics:
            up = metrics[parents[name]].get("MetricThreshold")
            if up:
                m["MetricThreshold"] = f"({m['MetricThreshold']}) & ({up})"
    return metrics


PERF_METRICS = {"FRONTEND_BOUND": "topdown-fe-bound", "BAD_SPECULATION": "topdown-bad-spec",
                "BACKEND_BOUND": "topdown-be-bound", "RETIRING": "topdown-retiring",
                "HEAVY_OPERATIONS": "topdown-heavy-ops",
                "BRANCH_MISPREDICTS": "topdown-br-mispredict",
                "FETCH_LATENCY": "topdown-fetch-lat", "MEMORY_BOUND": "topdown-mem-bound"}
CONSTANTS = {"HYPERTHREADING_ON": "#smt_on"}


def perfmon_event(name):
    """An event of Intel's perfmon metric JSON in perf's spelling, escaped for the tokenizer."""
    base, *modifiers = name.split(":")
    if base.startswith("PERF_METRICS."):
        return PERF_METRICS[base.split(".", 1)[1]].replace("-", "\\-")
    terms = []
    for m in modifiers:
        if m == "perf_metrics":
            continue
        kind = re.fullmatch(r"([cei])(\d+)", m)
        umask = re.fullmatch(r"u(0x[0-9a-fA-F]+)", m)
        equal = re.fullmatch(r"eq(\d+)", m)
        if kind:
            terms.append({"c": f"cmask\\={kind.group(2)}", "e": "edge",
                          "i": "inv"}[kind.group(1)])
        elif umask:
            terms.append(f"umask\\={umask.group(1).lower()}")
        elif equal:
            terms.append(f"eq\\={equal.group(1)}")
        else:
            # `:retire_latency` is sampled, not counted; `:SUP`, `:USER`, `:percore`, MSR values:
            # nodes that read them are left out (see UNMEASURABLE in the output).
            raise ValueError(f"event modifier {m} of {name}")
    if not terms:
        return base
    escaped = "\\,".join([base] + terms)
    return f"cpu@{escaped}@"


def load_perfmon(path):
    """Intel's perfmon metric JSON (TMA category) as perf-style metrics by MetricName."""
    doc = json.load(open(path))
    tma = [m for m in doc["Metrics"] if m.get("Category") == "TMA"]
    legacy = {m["LegacyName"]: m["MetricName"] for m in tma if m.get("LegacyName")}
    metrics = {}
    for m in tma:
        names = {e["Alias"]: e["Name"] for e in m.get("Events", [])}
        constants = {c["Alias"]: c["Name"] for c in m.get("Constants", [])}
        def alias(match):
            word = match.group(0)
            if word in names:
                return perfmon_event(names[word])
            if word in constants:
                return CONSTANTS.get(constants[word], constants[word])
            return word
        metric = {"_level": m.get("Level"), "_parent": m.get("ParentCategory")}
        try:
            metric["MetricExpr"] = re.sub(r"\b[a-z_][a-z0-9_]*\b(?!\s*\()", alias,
                                          m["Formula"])
        except ValueError as error:
            metric["_unsupported"] = str(error)
            metric["MetricExpr"] = "0"
        threshold = m.get("Threshold") or {}
        if threshold.get("Formula"):
            # Metrics are generated as fractions (see `model_code`); these thresholds compare
            # percent values, so a metric is `( NAME * 100 )` in them.
            values = {t["Alias"]: f"( {legacy[t['Value']]} * 100 )"
                      for t in threshold.get("ThresholdMetrics", []) if t["Value"] in legacy}
            text = threshold["Formula"]
            if values:
                text = re.sub(r"\b[a-z]\b", lambda w: values.get(w.group(0), w.group(0)), text)
            else:
                # E-core style: legacy names compared as fractions, `&&`.
                text = re.sub(r"metric_TMA_[.]*(\w+)\(%\)", lambda w: w.group(1),
                              text).replace("&&", "&")
            metric["MetricThreshold"] = text
        metrics[m["MetricName"]] = metric
    return metrics


def load(model_files, unit):
    if model_files[0].endswith(".csv"):
        return load_atom_csv(os.path.join(DATA, model_files[0]), unit)
    if model_files[0].startswith("../intel-perfmon/"):
        return load_perfmon(os.path.join(DATA, model_files[0]))
    metrics = {}
    for path in model_files:
        for m in json.load(open(os.path.join(DATA, path))):
            if unit and m.get("Unit") != unit:
                continue
            name = m.get("MetricName") or m.get("ArchStdEvent", "").lower()
            if not name:
                continue
            name = name.lower() if "ArchStdEvent" in m else name
            merged = dict(metrics.get(name, {}))
            merged.update({k: v for k, v in m.items() if v is not None})
            metrics[name] = merged
    return metrics


def rust_ident(name):
    return "m_" + re.sub(r"[^0-9a-zA-Z_]", "_", name).lower()


LOWERCASE_EVENTS = False
# The literals perf's formulas take from the machine, as `inputs::Literal` names them.
LITERALS = {"#slots": "Slots", "#smt_on": "SmtOn", "#core_wide": "CoreWide",
            "#has_pmem": "HasPmem"}
L1_NODES = {"tma_frontend_bound", "tma_bad_speculation", "tma_backend_bound", "tma_retiring",
            "tma_smt_contention", "tma_backend_bound_aux"}


def event_name(name):
    """perf's spelling of one event: `pmu@EVENT@` without modifiers is just EVENT; Arm event
    names are case-insensitive and spelt in lower case, as sysfs has them. perf's newer Intel
    files write `slots` (the sysfs alias of TOPDOWN.SLOTS) and `cmask=0x1`: spelt here as the
    rest of the tool spells them, `TOPDOWN.SLOTS` and `cmask=1`."""
    if name == "slots":
        return "TOPDOWN.SLOTS"
    name = re.sub(r"\b(cmask|edge|inv)=0x([0-9a-fA-F]+)",
                  lambda m: f"{m.group(1)}={int(m.group(2), 16)}", name)
    plain = re.fullmatch(r"(?:cpu|cpu_core|cpu_atom)@([^,@]+)@", name)
    if plain:
        name = plain.group(1)
    return name.lower() if LOWERCASE_EVENTS else name


def emit(tree, metrics, events, literals):
    kind = tree[0]
    if kind == "num":
        return repr(float(tree[1])) if tree[1] != int(tree[1]) else f"{int(tree[1])}.0"
    if kind == "neg":
        return f"(-{emit(tree[1], metrics, events, literals)})"
    if kind == "sym":
        name = tree[1]
        if name in metrics:
            return rust_ident(name)
        if name.startswith("#"):
            # perf reads literals case-insensitively (`#SMT_on` is `#smt_on`).
            name = name.lower()
            literals.add(name)
            return f"x.literal(Literal::{LITERALS[name]})"
        name = event_name(name)
        events.add(name)
        # The event's index in the model's sorted event list, once the list is complete.
        return f"x.event(\x00{name}\x00)"
    if kind == "call":
        a = emit(tree[2], metrics, events, literals)
        b = emit(tree[3], metrics, events, literals)
        return {"d_ratio": f"d_ratio({a}, {b})", "min": f"min({a}, {b})",
                "max": f"max({a}, {b})"}[tree[1]]
    if kind == "if":
        c, y, n = (emit(t, metrics, events, literals) for t in tree[1:])
        return f"(if {c} != 0.0 {{ {y} }} else {{ {n} }})"
    op, a, b = tree[1], emit(tree[2], metrics, events, literals), emit(tree[3], metrics, events, literals)
    if op in "<>":
        return f"truth({a} {op} {b})"
    if op in "&|":
        return f"truth(({a} != 0.0) {op}{op} ({b} != 0.0))"
    if op == "^":
        return f"truth(({a} != 0.0) != ({b} != 0.0))"
    return f"({a} {op} {b})"


def refs(tree, metrics, out):
    if tree[0] == "sym" and tree[1] in metrics:
        out.add(tree[1])
    for child in tree[1:]:
        if isinstance(child, tuple):
            refs(child, metrics, out)


def top_level_terms(expr):
    """The terms of `expr`'s outermost sum (`a * 100 + b * 100` -> `a * 100`, `b * 100`)."""
    terms, depth, start = [], 0, 0
    for i, c in enumerate(expr):
        depth += (c == "(") - (c == ")")
        if depth == 0 and c in "+-" and i > 0 and expr[:i].strip() and expr[:i].rstrip()[-1] not in "*/(+-":
            terms.append(expr[start:i])
            start = i + 1
    return terms + [expr[start:]]


def is_percent(expr):
    """Whether a metric is written in percent: `100 * (...)`, or (Arm's V3/N3 overrides of
    the sbsa fractions) a sum whose every term ends in `* 100`."""
    if re.match(r"^\(?\s*100 \*", expr):
        return True
    return LOWERCASE_EVENTS and all(re.search(r"\*\s*100\s*$", t.strip())
                                    for t in top_level_terms(expr))


# Every Level 3 node of every model, with its Level 2 parent (the same in every model).
LEVEL3 = {}
# Models whose formulas estimate core clocks per thread with SMT on (`#core_wide < 1`).
ESTIMATES = {}


def model_code(name, doc, files, unit, mapping):
    global LOWERCASE_EVENTS
    LOWERCASE_EVENTS = all(f.startswith("arm64/") for f in files)
    metrics = load(files, unit)
    groups = lambda m: (m.get("MetricGroup") or "").split(";")
    # Level 3 nodes and their Level 2 parents; nodes that read what cannot be counted.
    level3, unmeasurable = {}, []
    if mapping is None:
        wanted = {n: n for n, m in metrics.items()
                  if {"TopdownL1", "TopdownL2"} & set(groups(m)) and n.startswith("tma_")}
        for n, m in metrics.items():
            parents = [g[:-len("_group")] for g in groups(m)
                       if g.startswith("tma_") and g.endswith("_group")
                       and g[:-len("_group")] in wanted
                       and g[:-len("_group")] not in L1_NODES]
            if "TopdownL3" in groups(m) and n.startswith("tma_") and parents:
                level3[n] = parents[0]
    else:
        wanted = {k: v for k, v in mapping.items() if k in metrics}
        if files[0].startswith("../intel-perfmon/") and files[0].endswith(".json"):
            for n, m in metrics.items():
                if m.get("_level") == 3 and m.get("_parent") in wanted \
                        and wanted[m["_parent"]] not in L1_NODES:
                    if "_unsupported" in m:
                        unmeasurable.append(f"tma_{n.lower()}")
                        continue
                    level3[n] = wanted[m["_parent"]]
    for n in level3:
        wanted[n] = n if n.startswith("tma_") else f"tma_{n.lower()}"
        # perf's E-core files: instruction fetch latency is the E-core's fetch latency (the
        # tree puts these nodes under it for E-core models: `Node::in_model`).
        parent = {"tma_ifetch_latency": "tma_fetch_latency"}.get(level3[n], level3[n])
        known = LEVEL3.setdefault(wanted[n], parent)
        if known != parent:
            raise SystemExit(f"{name}: {wanted[n]} under {level3[n]}, elsewhere {known}")
    trees = {}

    def tree_of(n):
        if n not in trees:
            try:
                trees[n] = parse(metrics[n]["MetricExpr"])
            except (KeyError, ValueError) as error:
                raise SystemExit(f"{name}: metric {n}: {error}")
        return trees[n]
    thresholds = {n: parse(metrics[n]["MetricThreshold"]) for n in wanted
                  if metrics[n].get("MetricThreshold")}
    # Every metric the wanted ones (and their thresholds) reach, in dependency order.
    order, seen = [], set()

    def visit(n):
        if n in seen:
            return
        seen.add(n)
        deps = set()
        refs(tree_of(n), metrics, deps)
        for d in sorted(deps):
            visit(d)
        order.append(n)

    for n in sorted(wanted):
        visit(n)
    for n in sorted(thresholds):
        deps = set()
        refs(thresholds[n], metrics, deps)
        for d in sorted(deps):
            visit(d)
    # Events each node needs (through the metrics and thresholds it references), so a live
    # counter set can hold only what the requested level uses.
    def events_of(tree, acc, seen_metrics):
        if tree[0] == "sym":
            if tree[1] in metrics:
                if tree[1] not in seen_metrics:
                    seen_metrics.add(tree[1])
                    events_of(tree_of(tree[1]), acc, seen_metrics)
            elif not tree[1].startswith("#"):
                acc.add(event_name(tree[1]))
        for child in tree[1:]:
            if isinstance(child, tuple):
                events_of(child, acc, seen_metrics)

    level_events = {1: set(), 2: set(), 3: set()}
    for n in wanted:
        level = 3 if n in level3 else 1 if wanted[n] in L1_NODES else 2
        acc = set()
        events_of(tree_of(n), acc, set())
        for at in range(level, 4):
            level_events[at] |= acc
        # Thresholds may reach deeper nodes (ICL: retiring's looks at heavy operations): their
        # events count only from Level 2; at Level 1 a missing one reads as "not over".
        if n in thresholds:
            for at in range(max(level, 2), 4):
                events_of(thresholds[n], level_events[at], set())

    events, literals, lines = set(), set(), []
    for n in order:
        body = emit(tree_of(n), metrics, events, literals)
        if is_percent(metrics[n]["MetricExpr"]):
            body = f"{body} / 100.0"
        lines.append(f"    let {rust_ident(n)} = {body};")
    lines += [f"    values[{i}] = {rust_ident(n)};" for i, n in enumerate(sorted(wanted))]
    lines += [f"    over[{i}] = {emit(thresholds[n], metrics, events, literals)} != 0.0;"
              for i, n in enumerate(sorted(thresholds))]
    index = {e: i for i, e in enumerate(sorted(events))}
    lines = [re.sub("\x00([^\x00]*)\x00", lambda m: str(index[m.group(1)]), line)
             for line in lines]
    upper = name.upper()
    code = [f"/// {doc}: the values of [`{upper}_NODES`] and the threshold verdicts of",
            f"/// [`{upper}_THRESHOLDS`] from the counts of [`{upper}_EVENTS`], by index.",
            f"pub fn {name}(x: &dyn Counts, values: &mut [f64], over: &mut [bool]) {{"]
    code += lines
    code += ["}", ""]
    code += [f"/// The nodes {name} computes, in the order of its values.",
             f"pub const {upper}_NODES: &[&str] = &[{', '.join(json.dumps(wanted[n]) for n in sorted(wanted))}];",
             "", f"/// The nodes whose data gives a threshold, in the order of its verdicts.",
             f"pub const {upper}_THRESHOLDS: &[&str] = &[{', '.join(json.dumps(wanted[n]) for n in sorted(thresholds))}];",
             ""]
    code += [f"/// Events {name} reads, as perf names them (its formulas read them by index).",
             f"pub const {upper}_EVENTS: &[&str] = &[{', '.join(json.dumps(e) for e in sorted(events))}];",
             "", f"/// Events {name} needs for the values of its Level 1 nodes.",
             f"pub const {upper}_L1_EVENTS: &[&str] = &[{', '.join(json.dumps(e) for e in sorted(level_events[1]))}];",
             "", f"/// Events {name} needs for the values of its Level 1 and 2 nodes.",
             f"pub const {upper}_L2_EVENTS: &[&str] = &[{', '.join(json.dumps(e) for e in sorted(level_events[2]))}];",
             "", f"/// {name}'s Level 3 nodes left out: they read events that are sampled, not counted",
             "/// (retire latency) or need terms the kernel's format files do not give.",
             f"pub const {upper}_UNMEASURABLE: &[&str] = &[{', '.join(json.dumps(n) for n in sorted(unmeasurable))}];",
             ""]
    ESTIMATES[name] = "#core_wide" in literals
    return "\n".join(code)


def main():
    print("// @generated by xtask/gen/tma_formulas.py from data/linux-pmu-events.")
    print("// Do not edit: change the generator and run it again (see its doc string).")
    print("#![allow(clippy::all, clippy::pedantic, unused_parens, unused_variables)]")
    print()
    print("use super::{Model, inputs::{Counts, Literal, d_ratio, max, min, truth}};")
    print()
    for model in MODELS:
        print(model_code(*model))
    print("/// Where each model's formulas come from: metric files (later ones override by")
    print("/// ArchStdEvent), the PMU unit they are for, and source metric -> node names (empty: the")
    print("/// TopdownL1/L2 `tma_` metrics keep their names). Read by the cross-check test.")
    print("pub const SOURCES: &[(&str, &[&str], Option<&str>, &[(&str, &str)])] = &[")
    for name, _doc, files, unit, mapping in MODELS:
        pairs = ", ".join(f"({json.dumps(k)}, {json.dumps(v)})" for k, v in sorted((mapping or {}).items()))
        unit_text = f"Some({json.dumps(unit)})" if unit else "None"
        print(f"    ({json.dumps(name)}, &[{', '.join(json.dumps(f) for f in files)}], {unit_text}, &[{pairs}]),")
    print("];")
    print()
    print("/// Every Level 3 node of any model and its Level 2 parent, by name.")
    print("pub const LEVEL3: &[(&str, &str)] = &[")
    for node, parent in sorted(LEVEL3.items()):
        print(f"    ({json.dumps(node)}, {json.dumps(parent)}),")
    print("];")
    print()
    print("/// Every generated model (Level 3 nodes left out name their parents in [`LEVEL3`]).")
    print("pub const MODELS: &[Model] = &[")
    for name, doc, *_ in MODELS:
        u = name.upper()
        print(f"    Model {{ name: {json.dumps(name)}, description: {json.dumps(doc)}, evaluate: {name}, "
              f"nodes: {u}_NODES, thresholds: {u}_THRESHOLDS, events: {u}_EVENTS, level1_events: {u}_L1_EVENTS, level2_events: {u}_L2_EVENTS, "
              f"unmeasurable: {u}_UNMEASURABLE, "
              f"per_thread_estimate: {'true' if ESTIMATES[name] else 'false'} }},")
    print("];")


main()
