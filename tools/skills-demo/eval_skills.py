#!/usr/bin/env python3
"""The skills demo's evaluation on the CPU (docs/SKILLS_DEMO.md): copies models/default.cmf, merges each domain's LoRA
adapter into it as a skill with a routing subspace fitted to the domain's fit prompts (`cmf skill add --lora
--prompts`), calibrates the router (`cmf skill calibrate`), routes every held-out test prompt (`cmf route --prompts`)
and measures held-out perplexity, backbone against skill, per domain (`cmf ppl --skill`). Prints a markdown report
and writes OUT.json. Standard library only; runs ./cmf."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

DOMAINS = ["python", "man", "info"]
NAMES = {"python": "Python docs", "man": "man pages", "info": "GNU info manuals"}


def cmf(args, root):
    t = time.time()
    p = subprocess.run([os.path.join(root, "cmf")] + args, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"cmf {' '.join(args)} failed:\n{p.stderr}")
    print(f"  cmf {' '.join(args[:2])} ... ({time.time() - t:.0f} s)", file=sys.stderr, flush=True)
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--adapters", required=True, help="the folder holding CONFIG/DOMAIN/ PEFT adapters")
    ap.add_argument("--config", default="mlp4")
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True, help="the .cmf to write (default.cmf plus three skills)")
    ap.add_argument("--root", default=os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
    ap.add_argument("--rank", default="4", help="the routing subspace's rank (4: chosen on dev prompts, route_sweep.py)")
    ap.add_argument("--window-len", default="512")
    ap.add_argument("--windows", default="16", help="at most this many windows per domain for ppl")
    ap.add_argument("--skip-ppl", action="store_true")
    args = ap.parse_args()
    root, out = args.root, args.out
    shutil.copyfile(os.path.join(root, "models", "default.cmf"), out)
    res = {"config": args.config, "routing": {}, "ppl": {}}
    for d in DOMAINS:
        cmf(["skill", "add", out, "--lora", os.path.join(args.adapters, args.config, d), "--id", d, "--name", NAMES[d],
             "--prompts", os.path.join(args.data, f"{d}.prompts.fit.txt"), "--rank", args.rank], root)
    res["calibration"] = cmf(["skill", "calibrate", out], root).stdout.strip()
    cmf(["compact", out], root)   # the appends left dead copies of header, directory and vocab behind
    res["bytes"] = os.path.getsize(out)
    confusion = {d: {} for d in DOMAINS}
    for d in DOMAINS:
        lines = cmf(["route", out, "--prompts", os.path.join(args.data, f"{d}.prompts.test.txt"), "--json"], root).stdout.splitlines()
        rs = [json.loads(l) for l in lines if l.strip()]
        best = sum(r["best"] == d for r in rs)
        win = sum(r["winner"] == d for r in rs)
        novel = sum(r["novel"] for r in rs)
        for r in rs:
            confusion[d][r["winner"] or "backbone"] = confusion[d].get(r["winner"] or "backbone", 0) + 1
        res["routing"][d] = {"prompts": len(rs), "best": best, "winner": win, "novel": novel, "to": confusion[d]}
    if not args.skip_ppl:
        for d in DOMAINS:
            text = os.path.join(args.data, f"{d}.test.txt")
            row = {}
            for who in ("none", d):
                p = cmf(["ppl", out, "--file", text, "--skill", who, "--window-len", args.window_len, "--windows",
                         args.windows, "--json"], root)
                row["backbone" if who == "none" else "skill"] = json.loads(p.stdout)
            res["ppl"][d] = row
    with open(out + ".json", "w") as f:
        json.dump(res, f, indent=1)
    print(f"# skills demo ({args.config}): {os.path.basename(out)}, {res['bytes'] / 1e6:.2f} MB\n")
    print(res["calibration"] + "\n")
    print("| domain | held-out prompts | least E on its skill | routed to its skill | routed to the backbone (novel) | to |")
    print("| --- | --- | --- | --- | --- | --- |")
    for d, r in res["routing"].items():
        n = r["prompts"]
        print(f"| {NAMES[d]} | {n} | {r['best']} ({100 * r['best'] / n:.0f}%) | {r['winner']} ({100 * r['winner'] / n:.0f}%) | "
              f"{r['novel']} | {r['to']} |")
    if res["ppl"]:
        print("\n| domain | held-out tokens scored | backbone ppl | skill ppl | change |")
        print("| --- | --- | --- | --- | --- |")
        for d, r in res["ppl"].items():
            b, s = r["backbone"]["perplexity"], r["skill"]["perplexity"]
            print(f"| {NAMES[d]} | {r['skill']['tokens']} | {b:.3f} | {s:.3f} | {100 * (s / b - 1):+.1f}% |")


if __name__ == "__main__":
    main()
