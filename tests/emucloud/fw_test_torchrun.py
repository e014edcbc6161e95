#!/usr/bin/python3
"""emucloud_fw_torchrun: PyTorch DDP (Gloo, CPU) with one torchrun per VM, plain and under
`rankmap run`, on 8 VMs in 2 racks (host 1000, uplink 250 Mbit/s, seed 1).

Checks: rankmap run gives every node a distinct node rank in plan order and adds torch 1.13's
--redirects/--tee fix; the loss curve is bit-identical to the plain run's; the median step time
is at least --min-speedup times faster (CTest's floor: docs/reliability.md, "Floors"; the number
for docs/performance.md comes from a longer run of this same script, see docs/frameworks.md).

  fw_test_torchrun.py --emucloud PATH --rankmap BIN [--steps N] [--repeat R]
                      [--min-speedup X] [--json OUT]

The plan comes from `rankmap plan --use-groups` on a topology built from truth.json (fw_lib).
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents_lib  # noqa: E402
import emucloud_testlib as lib  # noqa: E402
import fw_lib  # noqa: E402

kHere = os.path.dirname(os.path.abspath(__file__))
kPrefix = "fwtorch"


def extra(p):
    fw_lib.add_job_args(p)
    p.add_argument("--steps", type=int, default=3)


def run_job(args, tb, work, name, rankmap_args):
    logdir = os.path.join(work, name)
    cmd = [os.path.join(kHere, "fw_torchrun_all"), "--emucloud", args.emucloud, "--prefix",
           kPrefix, "--timeout", "300", "--env", "GLOO_SOCKET_IFNAME=eth0",
           # torchrun keeps a torchelastic_* log folder under TMPDIR: the test's, removed with it.
           "--env", f"TMPDIR={work}", "--logdir", logdir]
    cmd += rankmap_args
    train = [os.path.join(kHere, "fw_ddp_train.py"), "--steps", str(args.steps)]
    # The plain run carries the user's workaround for torch 1.13 on Python 3.11; the rankmap
    # run leaves it out, so that rankmap run must add it.
    cmd += ["--"] + (["--redirects", "1", "--tee", "1"] if not rankmap_args else []) + train
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=360)
    logs = {}
    for i in range(len(tb.truth["vms"])):
        with open(os.path.join(logdir, f"node{i}.log"), errors="replace") as f:
            logs[i] = f.read()
    tail = "\n".join(f"--- node{i}\n{t[-1500:]}" for i, t in logs.items())
    if p.returncode != 0:
        lib.fail(f"{name}: fw_torchrun_all exit {p.returncode}: {p.stderr.strip()}\n{tail}")
    steps, summary = [], None
    for text in logs.values():
        steps += fw_lib.json_lines(text, "step")
        s = fw_lib.json_lines(text, "summary")
        summary = summary or (s[0]["summary"] if s else None)
    if summary is None or len(steps) != args.steps + 1:
        # Every node's log, and the launcher's own output: this failure (CI at 92eb21f; once in
        # 17 runs before) left nothing else to tell what rank 0 did.
        lib.fail(f"{name}: expected {args.steps + 1} step lines and a summary from rank 0, got "
                 f"{len(steps)} and {'a' if summary else 'no'} summary; fw_torchrun_all exit 0, "
                 f"stdout:\n{p.stdout[-1500:]}\nstderr:\n{p.stderr[-1500:]}\n{tail}")
    return {"losses": [s["loss"] for s in steps], "median_step_s": summary["median_step_s"],
            "grad_bytes": summary["grad_bytes"], "logs": logs}


def main():
    args = lib.parse_args(extra)
    lib.require_environment()
    fw_lib.require_python_module("torch")
    if shutil.which("torchrun") is None:
        lib.skip("torchrun not found (python3-torch)")
    work = tempfile.mkdtemp(prefix="fw_test_torchrun.")
    try:
        with lib.Testbed(args.emucloud, kPrefix, ["--vms", "8", "--racks", "2", "--host-mbit",
                                                   "1000", "--uplink-mbit", "250", "--seed",
                                                   "1"]) as tb:
            _, ppath, plan, _ = agents_lib.plan_testbed(tb, args, work)
            tpath = os.path.join(work, "topology.json")
            provider = [vm["name"] for vm in tb.truth["vms"]]
            print(f"provider order: {provider} ({fw_lib.cross_rack_hops(provider, tb.truth)} "
                  f"cross-rack ring hops)", flush=True)
            print(f"plan order:     {plan['order']} "
                  f"({fw_lib.cross_rack_hops(plan['order'], tb.truth)} cross-rack ring hops, "
                  f"predicted {plan['predicted']['speedup']:.2f}x)", flush=True)
            plain, ours = [], []
            for r in range(args.repeat):
                plain.append(run_job(args, tb, work, f"plain{r}", []))
                ours.append(run_job(args, tb, work, f"rankmap{r}",
                                    ["--rankmap", args.rankmap, "--plan", ppath, "--topology",
                                     tpath]))
            # What rankmap run did on each node.
            ranks = {}
            for i, text in ours[0]["logs"].items():
                line = next((l for l in text.splitlines() if l.startswith("rankmap run:")), "")
                lib.check("node rank" in line, f"node{i}: {line[:160]}")
                lib.check("added --redirects 1 --tee 1" in line,
                          f"node{i}: rankmap run added torch 1.13's --redirects/--tee fix")
                ranks[provider[i]] = int(line.split("is node rank ")[1].split()[0])
            lib.check(sorted(ranks.values()) == list(range(len(provider))),
                      f"node ranks are a permutation: {ranks}")
            lib.check([n for n, _ in sorted(ranks.items(), key=lambda kv: kv[1])] == plan["order"],
                      "node ranks follow the plan's order")
            for r in range(args.repeat):
                lib.check(ours[r]["losses"] == plain[0]["losses"],
                          f"run {r}: loss curve bit-identical to the plain run "
                          f"({plain[0]['losses'][-1]!r} at the last step)")
            tp = statistics.median(x["median_step_s"] for x in plain)
            tr = statistics.median(x["median_step_s"] for x in ours)
            speedup = tp / tr
            print(f"step time: provider order {tp:.3f} s, rankmap {tr:.3f} s, "
                  f"speedup {speedup:.2f}x ({plain[0]['grad_bytes'] / 1e6:.1f} MB of gradients, "
                  f"{args.steps} steps x {args.repeat} runs)", flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"provider_step_s": [x["median_step_s"] for x in plain],
                               "rankmap_step_s": [x["median_step_s"] for x in ours],
                               "speedup": speedup, "steps": args.steps,
                               "grad_bytes": plain[0]["grad_bytes"],
                               "predicted": plan["predicted"]["speedup"],
                               "losses": plain[0]["losses"]}, f, indent=1)
            lib.figure("fw_torchrun.ddp_step_speedup", speedup, args.min_speedup)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("PASS", flush=True)


if __name__ == "__main__":
    main()
