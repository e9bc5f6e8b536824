#!/usr/bin/env python3
"""Side-by-side speed of Kestrel and llama.cpp on the same GGUF files, in one run.

Each of ROUNDS rounds runs, for every model, `llama-bench` and `kestrel speed` (pp and tg),
alternating which program goes first from round to round so that drift of the machine (other
load, thermal or memory state) hits both. The table reports each program's median over the
rounds, the range, and the ratio of the medians, beside the STREAM triad measured before and
after, and names the llama.cpp version (`llama-bench --version`; the build commit and number
from its JSON where that prints none). Appends a dated markdown section to OUT.

    bench_side_by_side.py --llama-bin DIR --kestrel BIN --out OUT.md --title TITLE \\
        [--baseline BIN] --model PATH[,pp=512][,depth=N][,kv=f16|q8][,bytes=N][,label=NAME] [--model ...]
                                                                   (pp=0: decode only)

`depth` measures pp and tg after N tokens already in the KV cache (llama-bench `-d N`,
`kestrel speed -d N`); `kv` stores that cache as f16 (both programs' default at depth: llama.cpp's
f16, Kestrel `--kv-cache-dtype f16`) or 8-bit (llama.cpp q8_0 with flash attention, Kestrel q8).
`bytes` overrides the bytes a decode step reads (default: Kestrel's own count, all weights plus
the KV cache at that depth; a mixture-of-experts model reads only its active experts).
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys


def parse_model(spec):
    path, *opts = spec.split(",")
    m = {"path": path, "pp": 512, "depth": 0, "kv": "f16", "bytes": None,
         "label": os.path.basename(path)}
    for o in opts:
        key, value = o.split("=", 1)
        m[key] = value if key in ("label", "kv") else int(value)
    if m["kv"] not in ("f16", "q8"):
        raise SystemExit(f"kv={m['kv']}: f16 or q8")
    return m


def test_name(kind, n, m):
    """`pp512`, or `tg128 @ d8192` at a depth."""
    return f"{kind}{n}" + (f" @ d{m['depth']}" if m["depth"] else "")


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def llama_run(args, m):
    cmd = [os.path.join(args.llama_bin, "llama-bench"), "-m", m["path"], "-p", str(m["pp"]),
           "-n", str(args.gen), "-t", str(args.threads), "-r", str(args.reps), "-o", "json"]
    if m["depth"]:
        cmd += ["-d", str(m["depth"])]
    if m["kv"] == "q8":
        cmd += ["-ctk", "q8_0", "-ctv", "q8_0", "-fa", "1"]
    res = run_json(cmd)
    pick = lambda p, g: next(r["avg_ts"] for r in res if r["n_prompt"] == p and r["n_gen"] == g)
    build = f"{res[0].get('build_commit', '?')} ({res[0].get('build_number', '?')})"
    pp = pick(m["pp"], 0) if m["pp"] else None
    return {"pp": pp, "tg": pick(0, args.gen), "build": build}


def kestrel_run(args, m, binary=None):
    cmd = [binary or args.kestrel, "speed", "--model", m["path"], "-p", str(m["pp"]), "-n", str(args.gen),
           "-t", str(args.threads), "-r", str(args.reps), "--json", "--kv-cache-dtype", m["kv"]]
    if m["depth"]:
        cmd += ["-d", str(m["depth"])]
    res = run_json(cmd)
    pp = res["pp"]["mean_tps"] if res["pp"] else None
    return {"pp": pp, "tg": res["tg"]["mean_tps"], "isa": res["isa"],
            "bytes": res["tg"]["bytes_per_token"]}


def llama_version(args):
    """The `version:` line of `llama-bench --version` (e.g. "0.5.0-dev (build 1, commit 0c1e570)"),
    or None where this build does not print one."""
    cmd = [os.path.join(args.llama_bin, "llama-bench"), "--version"]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in (res.stdout + res.stderr).splitlines():
        if line.lower().startswith("version:"):
            return line.split(":", 1)[1].strip()
    return None


def membw(args):
    res = run_json([args.kestrel, "membw", "-t", f"1,{args.threads}", "--json"])
    return {r["threads"]: r["triad_gbs"] for r in res["results"]}


def measure(args, models):
    runs = {m["label"]: {"llama": [], "kestrel": [], "baseline": []} for m in models}
    for r in range(args.rounds):
        for m in models:
            order = [("llama", llama_run), ("kestrel", kestrel_run)]
            if args.baseline:
                order.insert(1, ("baseline", lambda a, m: kestrel_run(a, m, a.baseline)))
            for name, fn in order if r % 2 == 0 else order[::-1]:
                runs[m["label"]][name].append(fn(args, m))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    return runs


def summary(values):
    med = statistics.median(values)
    return med, f"{med:.1f} ({min(values):.1f}-{max(values):.1f})"


def report(args, models, runs, bw_before, bw_after, load):
    t = args.threads
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    flags = open("/proc/cpuinfo").read()
    isa = [f for f in ("avx2", "avx512f", "avx512_vnni") if f" {f} " in flags]
    first = runs[models[0]["label"]]
    triad = min(bw_before[t], bw_after[t])
    build = first["llama"][0]["build"]
    llama = f"version {args.llama_version}" if args.llama_version else f"build {build}"
    lines = [
        f"### {args.title}, {t} threads ({datetime.date.today()})",
        "",
        f"Machine: {cpu}, {os.cpu_count()} cores, ISA flags {', '.join(isa)}; Kestrel kernels: "
        f"{first['kestrel'][0]['isa']}; llama.cpp {llama}; load average "
        f"(1/5/15 min) {load[0]} before, {load[1]} after.",
        "Memory bandwidth (`kestrel membw`, STREAM triad) on "
        f"{t} threads: {bw_before[t]:.1f} GB/s before, {bw_after[t]:.1f} GB/s after "
        f"(1 thread: {bw_before[1]:.1f}); % of triad below uses the lower, {triad:.1f} GB/s.",
        f"{args.rounds} rounds, alternating which program runs first; each round runs "
        f"`llama-bench -p P -n {args.gen} -t {t} -r {args.reps}` and "
        f"`kestrel speed -p P -n {args.gen} -t {t} -r {args.reps} --kv-cache-dtype f16` (`-d D` "
        "for the rows `@ dD`: after D tokens of context; `kv=q8` rows: llama.cpp "
        "`-ctk q8_0 -ctv q8_0 -fa 1`, Kestrel `--kv-cache-dtype q8`). Cells: median t/s over the "
        "rounds (min-max); ratio of the medians. tg GB/s = bytes a decode step reads (weights, "
        "plus the KV cache at a depth) x tokens/s.",
    ]
    if args.baseline:
        lines.append(f"Baseline: `{args.baseline}`, run in the same rounds between the two "
                     "(its median, and Kestrel / baseline).")
    if args.note:
        lines.append(args.note)
    base_head = ("| baseline t/s | vs baseline " if args.baseline else "")
    lines += [
        "",
        "| model | test | Kestrel t/s | llama.cpp t/s | ratio " + base_head
        + "| Kestrel GB/s (% triad) | llama.cpp GB/s (% triad) |",
        "| --- | --- | ---: | ---: | ---: | " + ("---: | ---: | " if args.baseline else "")
        + "---: | ---: |",
    ]
    for m in models:
        r = runs[m["label"]]
        bpt = m["bytes"] or r["kestrel"][0]["bytes"]
        gbs = lambda tps: f"{tps * bpt / 1e9:.1f} ({100 * tps * bpt / 1e9 / triad:.0f}%)"
        tests = [("pp", test_name("pp", m["pp"], m))] if m["pp"] else []
        for test, name in tests + [("tg", test_name("tg", args.gen, m))]:
            km, ks = summary([x[test] for x in r["kestrel"]])
            lm, ls = summary([x[test] for x in r["llama"]])
            bw = (gbs(km), gbs(lm)) if test == "tg" else ("", "")
            base = ""
            if args.baseline:
                bm, bs = summary([x[test] for x in r["baseline"]])
                base = f" {bs} | {km / bm:.2f}x |"
            lines.append(f"| {m['label']} | {name} | {ks} | {ls} | {km / lm:.2f}x |{base} {bw[0]} | {bw[1]} |")
    lines.append("")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-bin", required=True)
    ap.add_argument("--kestrel", default="./target/release/kestrel")
    ap.add_argument("--baseline", default=None,
                    help="a second kestrel binary measured in the same rounds (e.g. main's)")
    ap.add_argument("--out", default=datetime.date.today().strftime("docs/benchmarks/%Y-%m-%d-side-by-side.md"))
    ap.add_argument("--title", default="Kestrel vs llama.cpp")
    ap.add_argument("--note", default="")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--model", action="append", required=True, type=parse_model)
    args = ap.parse_args()
    args.llama_version = llama_version(args)
    load_before = " ".join(open("/proc/loadavg").read().split()[:3])
    bw_before = membw(args)
    runs = measure(args, args.model)
    bw_after = membw(args)
    load_after = " ".join(open("/proc/loadavg").read().split()[:3])
    text = report(args, args.model, runs, bw_before, bw_after, (load_before, load_after))
    print(text)
    existing = open(args.out).read().rstrip() + "\n\n" if os.path.exists(args.out) else ""
    with open(args.out, "w") as f:
        f.write(existing + text)


if __name__ == "__main__":
    main()
