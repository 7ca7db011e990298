#!/usr/bin/env python3
"""Generates topdown-user/src/pmu/events/<table>.tsv: every core event of a CPU as
`NAME<TAB>perf terms<TAB>counters` (`INT_MISC.UOP_DROPPING<TAB>event=0xad,umask=0x10<TAB>0-7`),
from Intel's perfmon event JSON and Linux perf's AMD pmu-events JSON in data/. The
PMU's sysfs `format/` files turn the terms into perf_event_attr config bits at run time, as perf
does (the fixed-counter events as perf's jevents.py spells them); the counters the event may use
(`0-3`, `0,1`, `fixed1`) plan the groups the kernel can schedule. AMD's files give no counters:
every Zen core counter takes every event (`0-5`).

    python3 xtask/gen/event_tables.py [SHARED_DATA_DIR] [OUT_DIR]

The tables are checked in; a test regenerates them and fails if they differ.
"""
import json
import os
import re
import sys

HERE = os.path.dirname(__file__)
DATA = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "../../data")
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "../../topdown-user/src/pmu/events")

TABLES = {
    "icelake": ["intel-perfmon/ICL/events/icelake_core.json"],
    "sapphirerapids": ["intel-perfmon/SPR/events/sapphirerapids_core.json"],
    "alderlake_core": ["intel-perfmon/ADL/events/alderlake_goldencove_core.json"],
    "alderlake_atom": ["intel-perfmon/ADL/events/alderlake_gracemont_core.json"],
    "skylake": ["intel-perfmon/SKL/events/skylake_core.json"],
    "goldmont": ["intel-perfmon/GLM/events/goldmont_core.json"],
    "zen4": ["linux-pmu-events/x86/amdzen4/core.json", "linux-pmu-events/x86/amdzen4/other.json",
             "linux-pmu-events/x86/amdzen4/branch.json"],
    "zen5": [f"linux-pmu-events/x86/amdzen5/{f}.json" for f in
             ("pipeline", "decode", "execution", "branch-prediction", "load-store")],
    "tremont": ["intel-perfmon/SNR/events/snowridgex_core.json"],
    "icelakex": ["intel-perfmon/ICX/events/icelakex_core.json"],
    "tigerlake": ["intel-perfmon/TGL/events/tigerlake_core.json"],
    "rocketlake": ["intel-perfmon/RKL/events/rocketlake_core.json"],
    "emeraldrapids": ["intel-perfmon/EMR/events/emeraldrapids_core.json"],
    "graniterapids": ["intel-perfmon/GNR/events/graniterapids_core.json"],
    "meteorlake_core": ["intel-perfmon/MTL/events/meteorlake_redwoodcove_core.json"],
    "crestmont": ["intel-perfmon/MTL/events/meteorlake_crestmont_core.json"],
    "lunarlake_core": ["intel-perfmon/LNL/events/lunarlake_lioncove_core.json"],
    "lunarlake_atom": ["intel-perfmon/LNL/events/lunarlake_skymont_core.json"],
    "arrowlake_core": ["intel-perfmon/ARL/events/arrowlake_lioncove_core.json"],
    "arrowlake_atom": ["intel-perfmon/ARL/events/arrowlake_skymont_core.json"],
    "skylakex": ["intel-perfmon/SKX/events/skylakex_core.json"],
    "cascadelakex": ["intel-perfmon/CLX/events/cascadelakex_core.json"],
    "haswell": ["intel-perfmon/HSW/events/haswell_core.json"],
    "haswellx": ["intel-perfmon/HSX/events/haswellx_core.json"],
    "broadwell": ["intel-perfmon/BDW/events/broadwell_core.json"],
    "broadwellx": ["intel-perfmon/BDX/events/broadwellx_core.json"],
    "sierraforest": ["intel-perfmon/SRF/events/sierraforest_core.json"],
    "grandridge": ["intel-perfmon/GRR/events/grandridge_core.json"],
}

# Arm: perf's common architectural and microarchitectural events, the recommended ones, and
# each core's own files where the data has them (their `ArchStdEvent` entries name common
# events; entries with an `EventCode` are the core's own). Arm's general counters take any
# event and CPU_CYCLES may also use the cycle counter: no counter list (no groups planned).
ARM_COMMON = ["linux-pmu-events/arm64/common-and-microarch.json",
              "linux-pmu-events/arm64/recommended.json"]
ARM_TABLES = {
    "neoverse_v1": [],
    "neoverse_n2": [],
    "neoverse_v3": ["linux-pmu-events/arm64/arm/neoverse-v3"],
    "neoverse_n3": ["linux-pmu-events/arm64/arm/neoverse-n3"],
}

ZERO = (None, "", "0", "0x0", "0x00")


# perf's own encodings of the fixed-counter events (tools/perf/pmu-events/jevents.py,
# `real_event`): perfmon writes them as fixed-counter pseudo-encodings (event 0x00, umask N+1).
FIXED = {"inst_retired.any": "event=0xc0", "inst_retired.any_p": "event=0xc0",
         "cpu_clk_unhalted.ref": "event=0x0,umask=0x03",
         "cpu_clk_unhalted.thread": "event=0x3c", "cpu_clk_unhalted.core": "event=0x3c",
         "cpu_clk_unhalted.thread_any": "event=0x3c,any=1"}


def terms(e):
    if (e.get("EventName") or "").lower() in FIXED:
        return FIXED[e["EventName"].lower()]
    code = e.get("EventCode", "")
    if "," in code:  # offcore events with two codes: not countable from one encoding
        return None
    out = [f"event={code.lower()}"]
    msr = (e.get("MSRIndex") or "").lower()
    if msr not in [z for z in ZERO if z is not None]:
        # The extra MSR a few events program, as perf's format terms name it: the frontend
        # event select (0x3f7), the load latency threshold (0x3f6), offcore response (0x1a6/7).
        term = {"0x3f7": "frontend", "0x3f6": "ldlat", "0x1a6": "offcore_rsp",
                "0x1a7": "offcore_rsp"}.get(msr.split(",")[0])
        if term is None:
            return None
        out.append(f"{term}={e['MSRValue'].lower()}")
    if e.get("UMask") not in ZERO:
        out.append(f"umask={e['UMask'].lower()}")
    for field, term in (("CounterMask", "cmask"), ("Invert", "inv"), ("EdgeDetect", "edge"),
                        ("AnyThread", "any")):
        if e.get(field) not in ZERO:
            out.append(f"{term}={e[field].lower()}")
    return ",".join(out)


def counters(e):
    """The counters an event may use: `fixedN`, or general counters as ranges (`0-3,5`)."""
    text = (e.get("Counter") or "").strip()
    if not text:
        return "0-5"
    fixed = re.fullmatch(r"Fixed counter (\d+)", text)
    if fixed:
        return f"fixed{fixed.group(1)}"
    numbers = sorted({int(n) for n in text.split(",") if n.strip().isdigit()})
    ranges, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            ranges.append(f"{start}" if start == n else f"{start}-{n}")
            start = None
    return ",".join(ranges) or "0-5"


def arm_table(table, dirs):
    """`NAME<TAB>event=0xNN<TAB>` rows of an Arm core: the common events, then its own."""
    rows, sources = {}, list(ARM_COMMON)
    for path in ARM_COMMON:
        for e in json.load(open(os.path.join(DATA, path))):
            if e.get("EventName") and e.get("EventCode"):
                rows[e["EventName"]] = f"event={e['EventCode'].lower()}\t"
    for d in dirs:
        for f in sorted(os.listdir(os.path.join(DATA, d))):
            if f == "metrics.json":
                continue
            sources.append(f"{d}/{f}")
            for e in json.load(open(os.path.join(DATA, d, f))):
                if e.get("EventName") and e.get("EventCode"):
                    rows[e["EventName"]] = f"event={e['EventCode'].lower()}\t"
    with open(os.path.join(OUT, f"{table}.tsv"), "w") as out:
        out.write(f"# generated by xtask/gen/event_tables.py from {', '.join(sources)}\n")
        for name in sorted(rows):
            out.write(f"{name}\t{rows[name]}\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    for table, dirs in ARM_TABLES.items():
        arm_table(table, dirs)
    for table, files in TABLES.items():
        rows = {}
        # Deprecated names stay (perf still takes them; Tremont's formulas read
        # TOPDOWN_BAD_SPECULATION.MONUKE, now FASTNUKE), after every current one.
        for deprecated in (False, True):
            for path in files:
                data = json.load(open(os.path.join(DATA, path)))
                for e in data["Events"] if isinstance(data, dict) else data:
                    name, encoded = e.get("EventName"), terms(e)
                    if name and encoded and (e.get("Deprecated") == "1") == deprecated:
                        rows.setdefault(name, f"{encoded}\t{counters(e)}")
        with open(os.path.join(OUT, f"{table}.tsv"), "w") as out:
            out.write(f"# generated by xtask/gen/event_tables.py from {', '.join(files)}\n")
            for name in sorted(rows):
                out.write(f"{name}\t{rows[name]}\n")


main()
