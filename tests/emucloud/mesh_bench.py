#!/usr/bin/python3
"""mesh_bench: a job with data-parallel and pipeline groups (mesh dp x pp, pp fastest) on the
emulated cloud in three orders, interleaved: the provider's (the plain launcher), the world ring's
plan (`rankmap run --plan plan.json`) and the mesh plan (`rankmap plan --mesh dp=D,pp=P --traffic
...`, then `rankmap run --plan`). For docs/performance.md (`A job's mesh`). A benchmark, not a
test: it checks only the job's results.

Jobs (--job): "mpi", an MPI program with row and column communicators (mesh_step.c under
mpirun; its integer results are checked); "torch", a PyTorch training step (mesh_train.py: Gloo,
groups from new_group, gradients all-reduced per data-parallel group, activations sent along the
pipeline) with one torchrun per VM (fw_torchrun_all); its loss curve must be bit-identical in
every order. The plans are made by `rankmap plan` with the testbed's calibration (rankmap run
plans without it), then applied unchanged by `rankmap run --plan`.

Pipeline: agents -> `rankmap probe` -> `rankmap plan` (--source probe, the default), or a
topology from truth.json (--source truth). Per run the three orders go in a rotating order; each
prints the slowest rank's median step. The table has medians over runs, the ratios, and the mesh
plan's predicted steps (plan.json "mesh") against the measured ones.

Usage: mesh_bench.py --emucloud E --rankmap R --rankmapd D [--job mpi --proof MESH_STEP | --job torch]
       [--vms 8 --racks 2 --seed S] [--dp 4 --pp 2] [--dp-bytes B --pp-bytes B] [--runs 3]
       [--profile-check]

--profile-check: a first run records the job's profile (`rankmap run --record-profile` under the
world ring's plan: the MPI shim preloaded, or for --job torch the Python hook in torchrun's
workers), `rankmap plan --profile` plans from it, and that plan joins the interleaved orders,
against the plan from the hand-written --mesh/--traffic.
"""

import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents_lib as al  # noqa: E402
import emucloud_testlib as lib  # noqa: E402
import fw_lib  # noqa: E402

kTimeoutS = 900
kHere = os.path.dirname(os.path.abspath(__file__))
# mesh_train.py's hidden size: the data-parallel bytes set its vocabulary, the pipeline bytes its
# tokens per step.
kTorchHidden = 512


def mpi_runner(tb, args, tmp, plans):
    """run(order) -> the slowest rank's median step (s) of mesh_step.c under mpirun; `plans`:
    order -> (plan.json, rankmap run's options) for the orders that go through rankmap run."""
    bins = {o: lib.stand_in_mpirun(os.path.join(tmp, o), args.rankmap, path, options)
            for o, (path, options) in plans.items()}

    def run(order):
        env = dict(os.environ)
        for k in ("RANKMAP_PLAN", "RANKMAP_TOPOLOGY", "LD_PRELOAD"):
            env.pop(k, None)
        if order in bins:
            env["PATH"] = bins[order] + os.pathsep + env.get("PATH", "")
        argv = tb.cmd("mpirun", "--prefix", args.prefix, "--timeout", str(kTimeoutS), "--",
                      args.proof, "--dp", str(args.dp), "--pp", str(args.pp), "--dp-bytes",
                      str(args.dp_bytes), "--pp-bytes", str(args.pp_bytes), "--iters",
                      str(args.iters), "--warmup", "1")
        p = subprocess.run(argv, capture_output=True, text=True, env=env,
                           timeout=kTimeoutS + 60)
        if p.returncode != 0:
            lib.fail(f"{order}: exit {p.returncode}: {p.stdout[-1000:]} {p.stderr[-2000:]}")
        if order in bins and not re.search(r"rankmap run: (launch|shim) mode", p.stderr):
            lib.fail(f"rankmap run did not apply the plan: {p.stderr[-2000:]}")
        if "check mesh_step wrong=0" not in p.stdout:
            lib.fail(f"{order}: wrong results: {p.stdout[-1000:]}")
        m = re.search(r"time mesh_step .* median_s=([0-9.]+)", p.stdout)
        return float(m.group(1))

    return run


def torch_sizes(args):
    """mesh_train.py's --vocab and --tokens for the bytes asked (kTorchHidden floats a row)."""
    row = kTorchHidden * 4
    return max(1, args.dp_bytes // row), max(1, args.pp_bytes // row)


def torch_runner(tb, args, tmp, plans, tpath):
    """run(order) -> rank 0's median step (s) of mesh_train.py, one torchrun per VM; every order's
    loss curve must equal the first run's (bit-identical), and under rankmap run every node must
    get its node rank from the plan. `plans`: order -> (plan.json, rankmap run's extra words) for
    the orders that go through rankmap run."""
    vocab, tokens = torch_sizes(args)
    losses = []
    count = [0]

    def run(order):
        count[0] += 1
        logdir = os.path.join(tmp, f"{order}{count[0]}")
        cmd = [os.path.join(kHere, "fw_torchrun_all"), "--emucloud", args.emucloud, "--prefix",
               args.prefix, "--timeout", str(kTimeoutS), "--env", "GLOO_SOCKET_IFNAME=eth0",
               "--env", f"TMPDIR={tmp}", "--logdir", logdir]
        if order in plans:
            cmd += ["--rankmap", args.rankmap, "--plan", plans[order][0], "--topology", tpath]
            cmd += [f"--rankmap-arg={w}" for w in plans[order][1]]
        train = [os.path.join(kHere, "mesh_train.py"), "--dp", str(args.dp), "--pp",
                 str(args.pp), "--steps", str(args.iters), "--hidden", str(kTorchHidden),
                 "--vocab", str(vocab), "--tokens", str(tokens)]
        # torch 1.13 on Python 3.11 needs --redirects/--tee; rankmap run adds them itself.
        cmd += ["--"] + (["--redirects", "1", "--tee", "1"] if order not in plans else []) + train
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=kTimeoutS + 60)
        logs = []
        for i in range(len(tb.truth["vms"])):
            with open(os.path.join(logdir, f"node{i}.log"), errors="replace") as f:
                logs.append(f.read())
        if p.returncode != 0:
            tail = "\n".join(f"--- node{i}\n{t[-1500:]}" for i, t in enumerate(logs))
            lib.fail(f"{order}: fw_torchrun_all exit {p.returncode}: {p.stderr.strip()}\n{tail}")
        if order in plans:
            with open(plans[order][0]) as f:
                want = json.load(f)["order"]
            provider = [vm["name"] for vm in tb.truth["vms"]]
            got = {}
            for i, text in enumerate(logs):
                line = next((x for x in text.splitlines() if x.startswith("rankmap run:")), "")
                m = re.search(r"is node rank (\d+)", line)
                if not m:
                    lib.fail(f"{order}: node{i}: rankmap run did not set a node rank: {line[:200]}")
                got[int(m.group(1))] = provider[i]
            if [got.get(r) for r in range(len(provider))] != want:
                lib.fail(f"{order}: node ranks {got} do not follow the plan's order {want}")
        steps, summary = [], None
        for text in logs:
            steps += fw_lib.json_lines(text, "step")
            s = fw_lib.json_lines(text, "summary")
            summary = summary or (s[0]["summary"] if s else None)
        if summary is None or len(steps) != args.iters + 1:
            lib.fail(f"{order}: expected {args.iters + 1} step lines and a summary from rank 0")
        curve = [x["loss"] for x in steps]
        if losses and curve != losses[0]:
            lib.fail(f"{order}: loss curve {curve} differs from the first run's {losses[0]}")
        losses.append(curve)
        ph = summary["median_step_phases"]
        print(f"  {order}: step {summary['median_step_s']:.3f} s, rank 0's pipeline "
              f"{ph['pp_s']:.3f} s, allreduce {ph['dp_s']:.3f} s", flush=True)
        return summary["median_step_s"]

    return run


def profile_plan(args, tmp, tpath, calib, run, profile_path, mplan):
    """One run recording the job's profile, then `rankmap plan --profile`: the plan's path."""
    t = run("record")
    if not os.path.exists(profile_path):
        lib.fail(f"the recording run wrote no profile at {profile_path}")
    with open(profile_path) as f:
        prof = json.load(f)
    print(f"recorded profile ({t:.3f} s step): " + "; ".join(
        f"{s['made_by']} {s['call']}: {len(s['groups'])} group(s) of {len(s['groups'][0])}, " +
        ", ".join(f"{x['collective']} {x['calls']} x {x['bytes']} B" for x in s["traffic"])
        for s in prof["sets"]), flush=True)
    path = os.path.join(tmp, "profile_plan.json")
    words = [args.rankmap, "plan", "--topology", tpath, "--profile", profile_path, "--out", path,
             *calib]
    if args.source != "probe":
        words.append("--use-groups")
    p = subprocess.run(words, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        lib.fail(f"rankmap plan --profile: exit {p.returncode}: {p.stderr.strip()}")
    with open(path) as f:
        pplan = json.load(f)
    pm = pplan["mesh"]
    print(f"profile plan: mesh {','.join(d['name'] + '=' + str(d['size']) for d in pm['dims'])}, "
          f"traffic {', '.join(d['collective'] + ':' + str(d['bytes']) for d in pm['dims'])}; "
          f"predicted step {pm['step_us'] / 1e6:.3f} s (the mesh plan's "
          f"{mplan['mesh']['step_us'] / 1e6:.3f} s); same order as the mesh plan: "
          f"{pplan['order'] == mplan['order']}", flush=True)
    return path


def add_args(p):
    p.add_argument("--rankmap", required=True)
    p.add_argument("--job", choices=("mpi", "torch"), default="mpi")
    p.add_argument("--proof", help="emucloud_mesh_step (--job mpi)")
    lib.add_testbed_args(p, seed=31)
    p.add_argument("--dp", type=int, default=4)
    p.add_argument("--pp", type=int, default=2)
    p.add_argument("--dp-bytes", type=int, default=16 << 20)
    p.add_argument("--pp-bytes", type=int, default=4 << 20)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--runs", type=int, default=3)
    al.add_source_args(p)
    p.add_argument("--prefix", default="emmesh")
    p.add_argument("--profile-check", action="store_true",
                   help="record the job's profile in a first run (rankmap run "
                        "--record-profile, world ring's plan: the MPI shim, or the Python hook "
                        "in torchrun's workers), plan from it (rankmap plan --profile) and add "
                        "that plan to the interleaved orders")


def main():
    args = lib.parse_args(add_args)
    if args.job == "mpi":
        if not args.proof:
            lib.fail("--job mpi needs --proof (emucloud_mesh_step)")
        lib.require_environment(("ip", "tc", "ethtool", "unshare", "mpirun"))
    else:
        lib.require_environment(("ip", "tc", "ethtool", "unshare", "torchrun"))
        fw_lib.require_python_module("torch")
    bench(lib.Testbed(args.emucloud, args.prefix, lib.up_args(args)), args)


def bench(tb, args):
    with tb, tempfile.TemporaryDirectory(prefix="rankmap-mesh-bench-") as tmp:
        os.chmod(tmp, 0o755)
        t0 = time.monotonic()
        calib = lib.plan_calibration()
        tpath, world_path, world, _ = al.plan_testbed(tb, args, tmp, calib)
        mesh = f"dp={args.dp},pp={args.pp}"
        if args.job == "torch":
            # The bytes mesh_train.py moves: its tables (the last stage's head adds H+1 floats).
            vocab, tokens = torch_sizes(args)
            args.dp_bytes, args.pp_bytes = vocab * kTorchHidden * 4, tokens * kTorchHidden * 4
        traffic = f"dp=allreduce:{args.dp_bytes},pp=sendrecv:{args.pp_bytes}"
        mesh_path = os.path.join(tmp, "mesh_plan.json")
        words = [args.rankmap, "plan", "--topology", tpath, "--mesh", mesh, "--traffic", traffic,
                 "--out", mesh_path, *calib]
        if args.source != "probe":
            words.append("--use-groups")
        p = subprocess.run(words, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            lib.fail(f"rankmap plan --mesh: exit {p.returncode}: {p.stderr.strip()}")
        print(p.stdout.strip(), flush=True)
        with open(mesh_path) as f:
            mplan = json.load(f)
        print(f"pipeline ({args.source} -> plans): {time.monotonic() - t0:.1f} s", flush=True)
        rack = {vm["name"]: vm["rack"] for vm in tb.truth["vms"]}
        provider = [vm["name"] for vm in tb.truth["vms"]]
        for name, order in (("provider", provider), ("world ring", world["order"]),
                            ("mesh", mplan["order"])):
            groups = [[rack[order[d * args.pp + q]] for d in range(args.dp)]
                      for q in range(args.pp)]
            print(f"{name:10s} racks by position {[rack[h] for h in order]}; dp groups' racks "
                  f"{groups}", flush=True)
        orders = ["plain", "world", "mesh"]
        if args.job == "mpi":
            plans = {"world": (world_path, ""), "mesh": (mesh_path, "")}
            if args.profile_check:
                profile_path = os.path.join(tmp, "recorded_profile.json")
                plans["record"] = (world_path, "--record-profile " + shlex.quote(profile_path))
            run = mpi_runner(tb, args, tmp, plans)
            if args.profile_check:
                pplan = profile_plan(args, tmp, tpath, calib, run, profile_path, mplan)
                plans["profile"] = (pplan, "")
                run = mpi_runner(tb, args, tmp, plans)
                orders.append("profile")
        else:
            plans = {"world": (world_path, []), "mesh": (mesh_path, [])}
            if args.profile_check:
                profile_path = os.path.join(tmp, "recorded_profile.json")
                plans["record"] = (world_path, ["--record-profile", profile_path])
            run = torch_runner(tb, args, tmp, plans, tpath)
            if args.profile_check:
                plans["profile"] = (profile_plan(args, tmp, tpath, calib, run, profile_path,
                                                 mplan), [])
                orders.append("profile")
        times = {o: [] for o in orders}
        for i in range(args.runs):
            k = i % len(orders)
            rot = orders[k:] + orders[:k]
            for o in rot:
                times[o].append(run(o))
            print(f"run {i}: " + ", ".join(f"{o} {times[o][-1]:.3f} s" for o in rot), flush=True)
        med = {o: statistics.median(times[o]) for o in orders}
        pm = mplan["mesh"]
        print(f"\n{args.job} job, {args.vms} VMs / {args.racks} racks, seed {args.seed}, host "
              f"{lib.fmt_rates(args.host_mbit)}, uplink {lib.fmt_rates(args.uplink_mbit)} Mbit/s, "
              f"plans from {args.source}; mesh {mesh}, traffic {traffic}; medians of {args.runs} "
              f"runs x {args.iters} steps")
        print("order       measured_s  predicted_s  predicted/measured-1")
        for o, pred in (("plain", pm["input_step_us"]), ("world", pm["world_ring_step_us"]),
                        ("mesh", pm["step_us"])):
            print(f"  {o:8s}  {med[o]:10.3f}  {pred / 1e6:11.3f}  {pred / 1e6 / med[o] - 1:+.1%}")
        print(f"mesh plan: {med['world'] / med['mesh']:.2f}x the world ring's plan, "
              f"{med['plain'] / med['mesh']:.2f}x the provider order")
        if "profile" in med:
            print(f"profile plan (from the recorded run): step {med['profile']:.3f} s, "
                  f"{med['profile'] / med['mesh'] - 1:+.1%} against the mesh plan from --mesh "
                  f"and --traffic")


if __name__ == "__main__":
    main()
