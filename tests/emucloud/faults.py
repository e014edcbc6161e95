#!/usr/bin/python3
"""The fault matrix (docs/reliability.md, "Fault matrix"): one emulated cloud, each fault injected
in turn, each outcome checked against the product's promise:
  - the job or command ends within its documented deadline (plus the slack stated per row), with
    identity order or an error naming what failed;
  - integer allreduce results are bit-exact whenever a collective returns success (`rankmap
    bench -c`, the MPI program's check lines against a plain run);
  - no process is left in the testbed's VMs (only the agents the row expects), no namespace or
    link of the testbed after `down`, no mount;
  - every agent's SQLite store opens cleanly afterwards (PRAGMA integrity_check) and holds the
    last committed topology.

Testbed: 4 VMs in 2 racks, host links 400 Mbit/s, uplinks 100 Mbit/s (slow enough that an 8 MiB
allreduce takes about a second, so a fault lands mid-collective; cheap for two CPUs). The engine's
ranks run standalone (RANKMAP_RANK/WORLD_SIZE/ROOT, RANKMAP_TIMEOUT=10s), so a dead or cut-off
peer is found by the survivors themselves, not by a launcher tearing the job down.

Prints the table (fault, expected, seen, seconds) and the counts; exits 1 when a row failed or a
result was wrong.
"""

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents_lib as al  # noqa: E402
import emucloud_testlib as tl  # noqa: E402

# Seed 2 interleaves the racks in the provider order (racks 1,0,1,0), so a plan permutes the
# ranks and "identity order" in a row is a visible outcome, not the plan's own order.
kUp = ["--vms", "4", "--racks", "2", "--host-mbit", "400", "--uplink-mbit", "100", "--seed", "2"]
kEngineTimeoutS = 10      # RANKMAP_TIMEOUT of the engine rows
kSlackS = 20              # a loaded 2-core CI machine
kRoundBoundS = 60         # a probe round with a dead or cut-off agent (agents_failures' bound)
kRunAgentTimeoutS = 5     # RANKMAP_RUN_AGENT_TIMEOUT's default
kBigBytes = 8 << 20       # ~1 s per allreduce on 100 Mbit/s uplinks


# ------------------------------------------------------------------------------------------
# the matrix


class Matrix:
    def __init__(self):
        self.rows = []

    def run(self, fault, expected, bound, fn, leftovers):
        """Runs fn() -> (ok, seen, wrong); records the row. An exception is a failed row, not the
        end of the matrix. `leftovers()` lists what the row left behind (a failure too)."""
        print(f"--- {fault}", flush=True)
        t0 = time.monotonic()
        try:
            ok, seen, wrong = fn()
        except Exception as e:  # noqa: BLE001 -- a row's failure is reported in its row
            ok, seen, wrong = False, f"error: {type(e).__name__}: {e}", 0
        dt = time.monotonic() - t0
        left = leftovers()
        if left:
            ok = False
            seen += f"; LEFT BEHIND: {', '.join(left)}"
        print(f"{'ok' if ok else 'FAIL'}: {fault}: {seen} ({dt:.1f} s)", flush=True)
        self.rows.append((fault, f"{expected} (<= {bound})", seen, dt, ok, wrong))

    def report(self):
        print("\n| fault | expected (bound) | seen | s |\n| --- | --- | --- | ---: |")
        for fault, exp, seen, dt, ok, _ in self.rows:
            cell = seen.replace("|", "/").replace("\n", " ")
            print(f"| {fault} | {exp} | {'' if ok else '**FAILED** '}{cell} | {dt:.1f} |")
        survived = sum(1 for r in self.rows if r[4])
        wrong = sum(r[5] for r in self.rows)
        print(f"\nfaults injected: {len(self.rows)}, survived: {survived}, wrong results: {wrong}",
              flush=True)
        return survived == len(self.rows) and wrong == 0


# ------------------------------------------------------------------------------------------
# helpers


def ns_procs(ns):
    """[(pid, comm)] of the processes in network namespace `ns`."""
    p = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    out = []
    for w in p.stdout.split():
        try:
            with open(f"/proc/{w}/comm") as f:
                out.append((int(w), f.read().strip()))
        except OSError:
            pass
    return out


def head_ns(tb):
    return tb.truth["head"]["name"]


def stray(tb, allowed=()):
    """Processes in the testbed's VMs and head other than `allowed` comms."""
    out = []
    for ns in [vm["name"] for vm in tb.truth["vms"]] + [head_ns(tb)]:
        out += [f"{ns}:{comm}[{pid}]" for pid, comm in ns_procs(ns) if comm not in allowed]
    return out


def kill9(ns, comm_prefix):
    """SIGKILL to the processes of `ns` whose comm starts with comm_prefix; returns how many."""
    n = 0
    for pid, comm in ns_procs(ns):
        if comm.startswith(comm_prefix):
            os.kill(pid, signal.SIGKILL)
            n += 1
    return n


def wait_procs(procs, timeout):
    """Waits for every Popen until `timeout` s from now; returns (exit codes or None, seconds)."""
    t0 = time.monotonic()
    codes = []
    for p in procs:
        left = max(0.0, timeout - (time.monotonic() - t0))
        try:
            codes.append(p.wait(timeout=left))
        except subprocess.TimeoutExpired:
            codes.append(None)
    return codes, time.monotonic() - t0


def kill_procs(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def wait_until(pred, timeout, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return None


class Ctx:
    def __init__(self, tb, args, work):
        self.tb, self.args, self.work = tb, args, work
        self.vms = [vm["name"] for vm in tb.truth["vms"]]
        self.addr = [vm["address"] for vm in tb.truth["vms"]]
        self.port = 29700
        self.agents = al.Agents(tb, args.rankmapd, args.rankmap)
        self.mounts = []

    def path(self, name):
        return os.path.join(self.work, name)

    def text(self, name):
        with open(self.path(name), errors="replace") as f:
            return f.read()


# ------------------------------------------------------------------------------------------
# plans (from truth.json: no probe needed for the engine and plan rows)


def make_plans(ctx):
    """plan.json (good), plan-b.json (a different, valid plan of the same hosts) and
    plan-stale.json (its topology measured in 2020) in ctx.work."""
    rm = ctx.args.rankmap
    topo = al.topology_from_truth(ctx.tb.truth)
    variants = {"plan": topo}
    b = json.loads(json.dumps(topo))
    b["bandwidth_mbps"] = [[None if v is None else v * 0.9 for v in row]
                           for row in b["bandwidth_mbps"]]
    b["links"]["uplinks"] = [[{"out_mbps": 90.0, "in_mbps": 90.0}
                              for _ in b["links"]["uplinks"][0]]]
    variants["plan-b"] = b
    s = json.loads(json.dumps(topo))
    s["time"] = "2020-01-01T00:00:00Z"
    variants["plan-stale"] = s
    o = json.loads(json.dumps(topo))  # the same network under other names: another job's plan
    o["hosts"] = [{"name": f"other{k}", "address": f"192.0.2.{k + 1}"}
                  for k in range(len(o["hosts"]))]
    o["groups"][0]["groups"] = [[f"other{ctx.vms.index(n)}" for n in g]
                                for g in o["groups"][0]["groups"]]
    variants["plan-other"] = o
    plans = {}
    for name, t in variants.items():
        tpath = ctx.path(f"{name}.topology.json")
        with open(tpath, "w") as f:
            json.dump(t, f)
        ppath = ctx.path(f"{name}.json")
        p = subprocess.run([rm, "plan", "--topology", tpath, "--out", ppath, "--use-groups",
                            "-c", "all"], capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            tl.fail(f"rankmap plan {name}: exit {p.returncode}: {p.stderr.strip()}")
        os.chmod(ppath, 0o644)
        with open(ppath) as f:
            plans[name] = json.load(f)
    if plans["plan"]["hash"] == plans["plan-b"]["hash"]:
        tl.fail("plan-b has the same hash as plan: the disagreement rows would test nothing")
    if plans["plan"]["permutation"] == list(range(len(ctx.vms))):
        tl.fail("plan.json keeps the provider order: identity in the plan rows would show nothing")
    return plans


# ------------------------------------------------------------------------------------------
# the engine: rankmap bench, one standalone process per VM


def start_ranks(ctx, tag, algo, plans, iters, size=kBigBytes, env=()):
    """`rankmap bench` on every VM (rank i on VM i), plans[i] its --plan (None: none). Returns the
    Popens; stdout/stderr in ctx.work/tag.rI.{out,err}."""
    ctx.port += 1
    procs = []
    for i, vm in enumerate(ctx.vms):
        words = ["env", f"RANKMAP_RANK={i}", f"RANKMAP_WORLD_SIZE={len(ctx.vms)}",
                 f"RANKMAP_ROOT={ctx.addr[0]}:{ctx.port}", f"RANKMAP_TIMEOUT={kEngineTimeoutS}s",
                 *env, ctx.args.rankmap, "bench", "-b", str(size), "-e", str(size), "-n",
                 str(iters), "-w", "0", "--algo", algo, "--check", "--json"]
        if plans[i]:
            words += ["--plan", plans[i]]
        out = open(ctx.path(f"{tag}.r{i}.out"), "w")
        err = open(ctx.path(f"{tag}.r{i}.err"), "w")
        procs.append(subprocess.Popen(ctx.tb.exec_argv(vm, *words), stdout=out, stderr=err))
        out.close()
        err.close()
    return procs


def bench_result(ctx, tag, rank):
    """(wrong elements or None, algos) from rank's JSON lines."""
    wrong, algos = None, set()
    for line in ctx.text(f"{tag}.r{rank}.out").splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            if j.get("summary"):
                wrong = j["wrong"]
            else:
                algos.add(j["algo"])
    return wrong, algos


def wrong_of_successes(ctx, tag, codes):
    """Wrong results when any rank returned success: a success must be bit-exact. Rank 0 prints
    the results; its `wrong` is every rank's count summed by the check's own allreduce."""
    if not any(c == 0 for c in codes):
        return 0
    w, _ = bench_result(ctx, tag, 0)
    return 0 if w == 0 else 1


def named(ctx, tag, ranks, victim):
    """The first error line of `ranks` that names rank `victim` (by rank or address), or ''."""
    for i in ranks:
        for line in ctx.text(f"{tag}.r{i}.err").splitlines():
            if f"rank {victim} " in line or f"{ctx.addr[victim]}:" in line:
                return f"rank {i}: {line.strip()[-150:]}"
    return ""


def wait_running(ctx, tag, procs):
    """Waits 1.5 s into the job: the bootstrap is over by then and the ranks are inside the
    allreduce (~1 s per iteration, 40 iterations). Returns False when a rank ended early."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.5:
        if any(p.poll() is not None for p in procs):
            return False
        time.sleep(0.1)
    return True


def engine_kill(ctx, algo):
    def fn():
        plan = ctx.path("plan.json")
        tag = f"kill-{algo}"
        procs = start_ranks(ctx, tag, algo, [plan] * 4, iters=40)
        try:
            if not wait_running(ctx, tag, procs):
                early = ctx.text(tag + '.r0.err')[-300:]
                return False, f"a rank ended before the fault: {early}", 0
            victim = 2
            n = kill9(ctx.vms[victim], "rankmap")
            codes, dt = wait_procs([p for i, p in enumerate(procs) if i != victim],
                                   kEngineTimeoutS + kSlackS)
        finally:
            kill_procs(procs)
        survivors = [i for i in range(4) if i != victim]
        wrong = wrong_of_successes(ctx, tag, codes)  # codes[0] is rank 0's
        who = named(ctx, tag, survivors, victim)
        hung = [i for i, c in zip(survivors, codes) if c is None]
        ok = n == 1 and not hung and all(c not in (None, 0) for c in codes) and bool(who)
        seen = (f"{n} killed; survivors exit {codes} {dt:.1f} s after the kill; "
                f"{who or 'no error names rank 2'}")
        return ok, seen, wrong
    return fn


def engine_link(ctx, back_after):
    """eth0 of rank 1's VM down mid-collective; up again after `back_after` s (None: only after
    the survivors ended)."""
    def fn():
        plan = ctx.path("plan.json")
        tag = f"link-{back_after}"
        victim = 1
        vm = ctx.vms[victim]
        procs = start_ranks(ctx, tag, "ring", [plan] * 4, iters=4 if back_after else 40)
        try:
            if not wait_running(ctx, tag, procs):
                early = ctx.text(tag + '.r0.err')[-300:]
                return False, f"a rank ended before the fault: {early}", 0
            ctx.tb.run("exec", "--prefix", ctx.tb.prefix, vm, "--", "ip", "link", "set", "eth0",
                       "down")
            if back_after:
                time.sleep(back_after)
                link_up(ctx, vm)
            codes, dt = wait_procs(procs, kEngineTimeoutS * 4 + kSlackS)
        finally:
            link_up(ctx, vm)
            kill_procs(procs)
        wrong = wrong_of_successes(ctx, tag, codes)
        who = named(ctx, tag, range(4), victim) or named(ctx, tag, [victim], 0)
        done = all(c is not None for c in codes)
        if back_after and done and all(c == 0 for c in codes):
            ok, seen = True, f"completed: exit {codes} after {dt:.1f} s"
        else:
            ok = done and all(c != 0 for c in codes) and bool(who)
            seen = f"failed: exit {codes} after {dt:.1f} s; {who or 'no error names rank 1'}"
        # The link is back: a new job across it completes, exact.
        tag2 = tag + "-after"
        procs = start_ranks(ctx, tag2, "ring", [plan] * 4, iters=1, size=1 << 20)
        try:
            codes2, _ = wait_procs(procs, kEngineTimeoutS + kSlackS)
        finally:
            kill_procs(procs)
        w2, _ = bench_result(ctx, tag2, 0)
        wrong += wrong_of_successes(ctx, tag2, codes2)
        ok = ok and codes2 == [0] * 4 and w2 == 0
        seen += f"; link up: next job exit {codes2}, wrong {w2}"
        return ok, seen, wrong
    return fn


def link_up(ctx, vm):
    ctx.tb.run("exec", "--prefix", ctx.tb.prefix, vm, "--", "ip", "link", "set", "eth0", "up",
               check=False)


def engine_plans(ctx, which):
    """Every rank applies identity order and the allreduce is exact: plans disagreeing
    (ranks 0,1 plan, 2,3 plan-b), or stale (all plan-stale, RANKMAP_PLAN_MAX_AGE=1h)."""
    def fn():
        tag = f"plans-{which}"
        env = ()
        if which == "disagree":
            plans = [ctx.path("plan.json")] * 2 + [ctx.path("plan-b.json")] * 2
        else:
            plans = [ctx.path("plan-stale.json")] * 4
            env = ("RANKMAP_PLAN_MAX_AGE=1h",)
        procs = start_ranks(ctx, tag, "ring", plans, iters=1, size=1 << 20, env=env)
        try:
            codes, dt = wait_procs(procs, kEngineTimeoutS + kSlackS)
        finally:
            kill_procs(procs)
        err0 = ctx.text(f"{tag}.r0.err")
        w, _ = bench_result(ctx, tag, 0)
        wrong = wrong_of_successes(ctx, tag, codes)
        said = [l for l in err0.splitlines() if "identity order" in l]
        ok = codes == [0] * 4 and w == 0 and bool(said)
        return ok, f"exit {codes}, wrong {w}; rank 0: {(said or [''])[0][-170:]}", wrong
    return fn


def nccl_plans(ctx, which):
    """The NCCL shim's CPU path: one process per VM (rank i on VM i) under
    LD_PRELOAD=librankmap_nccl.so over the NCCL test double in process mode (each init joins no
    world; what shows is the rank the shim hands to "NCCL"), rank 0's unique id passed through a
    file. `agree`: every rank holds plan.json and gets its plan rank (the control: the row could
    fail); `disagree`: ranks 0,1 plan, 2,3 plan-b; `stale`: all plan-stale with
    RANKMAP_PLAN_MAX_AGE=1h. Identity for every rank in the last two, with a warning."""
    def fn():
        tag = f"nccl-{which}"
        n = len(ctx.vms)
        env = ()
        if which == "disagree":
            plans = ["plan.json"] * 2 + ["plan-b.json"] * 2
        elif which == "stale":
            plans = ["plan-stale.json"] * n
            env = ("RANKMAP_PLAN_MAX_AGE=1h",)
        else:
            plans = ["plan.json"] * n
        idfile = ctx.path(f"{tag}.id")
        shared = ctx.path(f"{tag}.dir")
        os.makedirs(shared)
        procs = []
        for i, vm in enumerate(ctx.vms):
            words = ["env", f"LD_PRELOAD={ctx.args.nccl_shim}", "RANKMAP_NCCL_DOUBLE_PROCESS=1",
                     f"RANKMAP_NCCL_DOUBLE_ROOT={ctx.addr[0]}", f"RANKMAP_NCCL_DOUBLE_DIR={shared}",
                     f"RANKMAP_PLAN={ctx.path(plans[i])}",
                     f"RANKMAP_TIMEOUT={kEngineTimeoutS}s", *env, ctx.args.nccl_app, idfile,
                     str(i), str(n)]
            out = open(ctx.path(f"{tag}.r{i}.out"), "w")
            err = open(ctx.path(f"{tag}.r{i}.err"), "w")
            procs.append(subprocess.Popen(ctx.tb.exec_argv(vm, *words), stdout=out, stderr=err))
            out.close()
            err.close()
        try:
            codes, dt = wait_procs(procs, kEngineTimeoutS + kSlackS)
        finally:
            kill_procs(procs)
        got = []
        for i in range(n):
            line = ctx.text(f"{tag}.r{i}.out").strip().splitlines()
            got.append(json.loads(line[-1])["nccl_rank"] if line else None)
        said = [l for i in range(n) for l in ctx.text(f"{tag}.r{i}.err").splitlines()
                if "identity" in l]
        if which == "agree":
            want = ctx.plans["plan"]["permutation"]
            ok = codes == [0] * n and got == want and want != list(range(n))
            return ok, f"exit {codes}, NCCL ranks {got} (plan's {want}) in {dt:.1f} s", 0
        ok = codes == [0] * n and got == list(range(n)) and bool(said)
        return ok, (f"exit {codes}, NCCL ranks {got} in {dt:.1f} s; "
                    f"{(said or ['no warning'])[0][-150:]}"), 0
    return fn


# ------------------------------------------------------------------------------------------
# the MPI shim (engine mode) and rankmap run, through `emucloud mpirun`


def mpirun(ctx, words, env=None, timeout=120, hostfile=None):
    argv = ctx.tb.cmd("mpirun", "--prefix", ctx.tb.prefix, "--timeout", str(timeout),
                      *(["--hostfile", hostfile] if hostfile else []), "--", *words)
    e = dict(os.environ, **(env or {}))
    for k in ("RANKMAP_PLAN", "RANKMAP_TOPOLOGY", "LD_PRELOAD"):
        if not env or k not in env:
            e.pop(k, None)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=e)


def checks_of(out):
    return [l.strip() for l in out.splitlines() if l.startswith("check ")]


def hosts_of(out):
    """Hosts of MPI_COMM_WORLD ranks 0.. from the program's "rank r of n on HOST" lines."""
    got = {}
    for m in re.finditer(r"rank (\d+) of (\d+) on (\S+?) launcher (-?\d+)", out):
        got[int(m.group(1))] = m.group(3)
    return [got.get(r) for r in range(len(got))]


def proof_words(ctx, nbytes, iters):
    return [ctx.args.proof, "--bytes", str(nbytes), "--iters", str(iters), "--warmup", "0"]


def plain_reference(ctx):
    p = mpirun(ctx, proof_words(ctx, 1 << 16, 1))
    out, err = p.communicate(timeout=180)
    if p.returncode != 0:
        tl.fail(f"plain MPI run: exit {p.returncode}: {err[-500:]}")
    ctx.plain_checks = checks_of(out)
    tl.check(len(ctx.plain_checks) >= 4, f"plain MPI run: {len(ctx.plain_checks)} check lines")


def shim_kill(ctx):
    def fn():
        words = ["-x", f"LD_PRELOAD={ctx.args.shim}", "-x", "RANKMAP_MPI_ENGINE=1", "-x",
                 f"RANKMAP_PLAN={ctx.path('plan.json')}", "-x",
                 f"RANKMAP_TIMEOUT={kEngineTimeoutS}s", *proof_words(ctx, kBigBytes, 40)]
        p = mpirun(ctx, words)
        try:
            time.sleep(4)  # orteds, MPI_Init, the shim's engine bootstrap, first iterations
            if p.poll() is not None:
                out, err = p.communicate()
                return False, f"ended before the fault: exit {p.returncode}: {err[-300:]}", 0
            n = kill9(ctx.vms[2], os.path.basename(ctx.args.proof)[:15])
            t0 = time.monotonic()
            try:
                out, err = p.communicate(timeout=kEngineTimeoutS + kSlackS)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                return False, "mpirun did not end", 0
            dt = time.monotonic() - t0
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        said = [l for l in err.splitlines() if "signal" in l or "killed" in l.lower()]
        ok = n == 1 and p.returncode != 0
        return ok, f"{n} killed; mpirun exit {p.returncode} after {dt:.1f} s: " \
                   f"{(said or [''])[0][-150:]}", 0
    return fn


def shim_plans(ctx, which):
    """Shim (engine mode) ranks with disagreeing or stale plans: identity order (rank r on
    provider host r), results identical to plain, a warning."""
    def fn():
        wrapper = ctx.path(f"shim-{which}.sh")
        if which == "disagree":
            pick = 'case "$OMPI_COMM_WORLD_RANK" in 0|1) p=plan.json;; *) p=plan-b.json;; esac'
            extra = ""
        else:
            pick = "p=plan-stale.json"
            extra = "RANKMAP_PLAN_MAX_AGE=1h "
        with open(wrapper, "w") as f:
            f.write(f"#!/bin/sh\n{pick}\nexec env LD_PRELOAD={ctx.args.shim} RANKMAP_MPI_ENGINE=1 "
                    f"{extra}RANKMAP_PLAN={ctx.work}/$p RANKMAP_TIMEOUT={kEngineTimeoutS}s "
                    f"\"$@\"\n")
        os.chmod(wrapper, 0o755)
        t0 = time.monotonic()
        p = mpirun(ctx, [wrapper, *proof_words(ctx, 1 << 16, 1)])
        try:
            out, err = p.communicate(timeout=60 + kSlackS)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            return False, "mpirun did not end", 0
        dt = time.monotonic() - t0
        checks = checks_of(out)
        wrong = 0 if (p.returncode != 0 or checks == ctx.plain_checks) else 1
        hosts = hosts_of(out)
        said = [l for l in err.splitlines() if "identity" in l]
        ok = p.returncode == 0 and wrong == 0 and hosts == ctx.vms and bool(said)
        same = "identical" if not wrong else "DIFFER"
        where = "provider order" if hosts == ctx.vms else hosts
        return ok, (f"exit {p.returncode} in {dt:.1f} s, results {same}, ranks on {where}; "
                    f"{(said or ['no warning'])[0][-150:]}"), wrong
    return fn


class FakeAgent:
    """A listener on the head's loopback: 'slow' accepts and never answers; 'garbage' answers
    HTTP 200 with a body that is not JSON."""

    def __init__(self, ctx, kind, port):
        code = {
            "slow": "import socket,time\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,"
                    "socket.SO_REUSEADDR,1);s.bind(('127.0.0.1',%d));s.listen(8)\nc=[]\n"
                    "while True:\n c.append(s.accept()[0])\n" % port,
            "garbage": "import socket\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,"
                       "socket.SO_REUSEADDR,1);s.bind(('127.0.0.1',%d));s.listen(8)\n"
                       "while True:\n c=s.accept()[0];c.recv(65536)\n"
                       " b=b'<html>\\x00\\xff not a plan {{{'\n"
                       " c.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\n"
                       "Content-Length: %%d\\r\\n\\r\\n' %% len(b) + b);c.close()\n" % port,
        }[kind]
        self.proc = subprocess.Popen(["ip", "netns", "exec", head_ns(ctx.tb), "/usr/bin/python3",
                                      "-c", code], stderr=subprocess.PIPE)
        time.sleep(0.5)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def run_agent(ctx, kind):
    """rankmap run --agent URL -- mpirun ... with the agent unreachable, slow or answering
    garbage: the job runs unchanged (provider order) after at most RANKMAP_RUN_AGENT_TIMEOUT,
    results identical to plain, a warning naming the agent."""
    def fn():
        port = {"unreachable": 7490, "slow": 7491, "garbage": 7492}[kind]
        fake = FakeAgent(ctx, kind, port) if kind != "unreachable" else None
        bindir = os.path.join(ctx.work, f"bin-{kind}")
        os.makedirs(bindir, exist_ok=True)
        with open(os.path.join(bindir, "mpirun"), "w") as f:
            f.write(f"#!/bin/sh\nexec {ctx.args.rankmap} run --agent http://127.0.0.1:{port} "
                    f"-- /usr/bin/mpirun \"$@\"\n")
        os.chmod(os.path.join(bindir, "mpirun"), 0o755)
        try:
            env = {"PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
                   "RANKMAP_RUN_DIR": ctx.rundir}
            t0 = time.monotonic()
            p = mpirun(ctx, proof_words(ctx, 1 << 16, 1), env=env)
            try:
                out, err = p.communicate(timeout=kRunAgentTimeoutS + 60 + kSlackS)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                return False, "the job did not end", 0
            dt = time.monotonic() - t0
        finally:
            if fake:
                fake.stop()
        checks = checks_of(out)
        wrong = 0 if (p.returncode != 0 or checks == ctx.plain_checks) else 1
        said = [l for l in err.splitlines() if "rankmap run" in l]
        hosts = hosts_of(out)
        # The plan request is bounded by RANKMAP_RUN_AGENT_TIMEOUT; the job itself takes ~1 s.
        ok = p.returncode == 0 and wrong == 0 and hosts == ctx.vms and \
            any(f"127.0.0.1:{port}" in l for l in said) and dt <= kRunAgentTimeoutS + kSlackS
        return ok, (f"exit {p.returncode} in {dt:.1f} s, provider order "
                    f"{'kept' if hosts == ctx.vms else hosts}; "
                    f"{(said or ['no line'])[0][-170:]}"), wrong
    return fn


def run_plan(ctx, which):
    """rankmap run --plan P -- mpirun ...: P stale (RANKMAP_PLAN_MAX_AGE=1h), or another job's plan
    (its hosts are not the job's): the job runs unchanged, identical results, a line saying why."""
    def fn():
        plan = ctx.path(f"plan-{which}.json")
        bindir = tl.stand_in_mpirun(os.path.join(ctx.work, which), ctx.args.rankmap, plan)
        env = {"PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
               "RANKMAP_RUN_DIR": ctx.rundir}
        if which == "stale":
            env["RANKMAP_PLAN_MAX_AGE"] = "1h"
        t0 = time.monotonic()
        p = mpirun(ctx, proof_words(ctx, 1 << 16, 1), env=env)
        try:
            out, err = p.communicate(timeout=60 + kSlackS)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            return False, "the job did not end", 0
        dt = time.monotonic() - t0
        checks = checks_of(out)
        wrong = 0 if (p.returncode != 0 or checks == ctx.plain_checks) else 1
        said = [l for l in err.splitlines() if "rankmap run" in l]
        hosts = hosts_of(out)
        word = "stale" if which == "stale" else "other0"
        ok = p.returncode == 0 and wrong == 0 and hosts == ctx.vms and \
            any(word in l for l in said)
        return ok, (f"exit {p.returncode} in {dt:.1f} s, provider order "
                    f"{'kept' if hosts == ctx.vms else hosts}; "
                    f"{(said or ['no line'])[0][-170:]}"), wrong
    return fn


# ------------------------------------------------------------------------------------------
# agents: probe rounds under faults, the store


def db_path(ctx, vm):
    return os.path.join(ctx.agents.dir, "state", vm, "rankmapd.db")


def store_version(path):
    """(integrity_check result, newest topology version or None) of a store, read-only."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        ic = con.execute("PRAGMA integrity_check").fetchone()[0]
        v = con.execute("SELECT MAX(version) FROM topologies").fetchone()[0]
        return ic, v
    finally:
        con.close()


def health(ctx, vm):
    """The agent's /v1/health, or None when it does not answer 200 (agents_lib fails the test
    on a refused connection: here that is an outcome to report)."""
    try:
        status, h = ctx.agents.get_json(vm, "/v1/health")
    except SystemExit:
        return None
    return h if status == 200 else None


def versions(ctx):
    out = {}
    for vm in ctx.vms:
        h = health(ctx, vm)
        out[vm] = h["topology_version"] if h else None
    return out


def start_round(ctx, vm):
    status, text = ctx.agents.http(vm, "POST", "/v1/probe", "{}", ctx.agents.token())
    if status != 202:
        raise RuntimeError(f"POST /v1/probe on {vm}: {status} {text[:200]}")
    return json.loads(text)["round_id"]


def round_state(ctx, vm, rid):
    _, st = ctx.agents.get_json(vm, f"/v1/rounds/{rid}")
    return st


kPoller = r"""
import json, sys, time, urllib.request
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        with urllib.request.urlopen("http://127.0.0.1:7410/v1/health", timeout=5) as r:
            rd = json.load(r).get("round")
    except OSError:
        rd = None
    if rd and rd.get("phase") in ("structure", "links"):
        print(rd["id"], rd["phase"], flush=True)
        sys.exit(0)
    time.sleep(0.01)
sys.exit(1)
"""


def wait_measuring(ctx, vm, rid=None):
    """Returns once the round running on vm's agent measures (structure or links phase), polled
    from inside the VM every 10 ms so that the fault lands mid-round (a 4-VM round takes ~2 s).
    Returns the round id."""
    p = subprocess.run(ctx.tb.exec_argv(vm, "/usr/bin/python3", "-c", kPoller),
                       capture_output=True, text=True, timeout=90)
    if p.returncode != 0:
        raise RuntimeError(f"no round measuring on {vm} within 60 s: {p.stderr[-200:]}")
    got = int(p.stdout.split()[0])
    if rid is not None and got != rid:
        raise RuntimeError(f"round {got} measures on {vm}, expected {rid}")
    return got


def wait_round(ctx, vm, rid, timeout):
    t0 = time.monotonic()
    st = wait_until(lambda: (lambda s: s if s["status"] != "running" else None)(
        round_state(ctx, vm, rid)), timeout, 0.2)
    return st, time.monotonic() - t0


def stores_clean(ctx, expect=None):
    """Every agent's store passes integrity_check (read while the agents run, WAL readers do not
    block) and, with `expect` {vm: version}, holds that version as its newest."""
    bad = []
    for vm in ctx.vms:
        ic, v = store_version(db_path(ctx, vm))
        if ic != "ok":
            bad.append(f"{vm}: integrity {ic}")
        if expect and vm in expect and v != expect[vm]:
            bad.append(f"{vm}: newest topology {v}, expected {expect[vm]}")
    return bad


def agent_kill(ctx, coordinator):
    def fn():
        before = versions(ctx)
        coord = ctx.vms[0]
        victim = coord if coordinator else ctx.vms[2]
        if coordinator:
            # The client `rankmap probe --agent` waits on its agent; the agent dies under it.
            argv = ctx.tb.exec_argv(coord, ctx.args.rankmap, "probe", "--hosts",
                                    ctx.agents.file("hosts"), "--agent", "http://127.0.0.1:7410",
                                    "--token-file", ctx.agents.file("token"), "--out",
                                    ctx.path("coord.json"), "--timeout", "120s")
            client = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
            rid = wait_measuring(ctx, coord)
            ctx.agents.stop(vms=[victim], kill=True)
            t0 = time.monotonic()
            try:
                out, err = client.communicate(timeout=kRoundBoundS)
            except subprocess.TimeoutExpired:
                client.kill()
                client.communicate()
                return False, "rankmap probe did not end after its agent died", 0
            dt = time.monotonic() - t0
            ctx.agents.start(vms=[victim])
            st = round_state(ctx, coord, rid)
            after = versions(ctx)
            bad = stores_clean(ctx, before)
            ok = client.returncode not in (0, None) and st["status"] != "running" and not bad \
                and after == before
            msg = (err.strip().splitlines() or [""])[-1]
            return ok, (f"rankmap probe exit {client.returncode} {dt:.1f} s after the kill: "
                        f"{msg[-140:]}; restarted: round {rid} {st['status']}, versions "
                        f"{sorted(set(after.values()))} as before"
                        f"{'; ' + ', '.join(bad) if bad else ''}"), 0
        rid = start_round(ctx, coord)
        wait_measuring(ctx, coord, rid)
        ctx.agents.stop(vms=[victim], kill=True)
        st, dt = wait_round(ctx, coord, rid, kRoundBoundS + kSlackS)
        ctx.agents.start(vms=[victim])
        after = versions(ctx)
        bad = stores_clean(ctx, {victim: before[victim]})
        ok = st is not None and st["status"] == "partial" and victim in (st.get("error") or "") \
            and after[victim] == before[victim] and not bad
        return ok, (f"round {st and st['status']} {dt:.1f} s after the kill "
                    f"({(st or {}).get('error', '')[-100:]}); restarted {victim} holds version "
                    f"{after[victim]}{'; ' + ', '.join(bad) if bad else ''}"), 0
    return fn


def agent_restart(ctx):
    def fn():
        coord, victim = ctx.vms[0], ctx.vms[3]
        rid = start_round(ctx, coord)
        wait_measuring(ctx, coord, rid)
        ctx.agents.stop(vms=[victim], kill=True)
        ctx.agents.start(vms=[victim])
        st, dt = wait_round(ctx, coord, rid, kRoundBoundS + kSlackS)
        h = health(ctx, victim)
        bad = stores_clean(ctx)
        ok = st is not None and st["status"] in ("ok", "partial") and h and h["status"] == "ok" \
            and not bad
        return ok, (f"round {st and st['status']} in {dt:.1f} s after the restart "
                    f"({(st or {}).get('error') or 'no error'}); {victim} serves version "
                    f"{h and h['topology_version']}{'; ' + ', '.join(bad) if bad else ''}"), 0
    return fn


def probe_link(ctx):
    def fn():
        coord, victim = ctx.vms[0], ctx.vms[3]
        rid = start_round(ctx, coord)
        wait_measuring(ctx, coord, rid)
        ctx.tb.run("exec", "--prefix", ctx.tb.prefix, victim, "--", "ip", "link", "set", "eth0",
                   "down")
        try:
            st, dt = wait_round(ctx, coord, rid, kRoundBoundS + kSlackS)
        finally:
            link_up(ctx, victim)
        rc, dt2, summary, err = ctx.agents.probe(coord, "--timeout", "120s", timeout=180)
        again = summary and summary.get("status") == "ok" and summary.get("missing_pairs") == 0
        ok = st is not None and st["status"] == "partial" and victim in (st.get("error") or "") \
            and bool(again) and not stores_clean(ctx)
        return ok, (f"round {st and st['status']} in {dt:.1f} s "
                    f"({(st or {}).get('error', '')[-90:]}); link back: next round "
                    f"{summary and summary.get('status')}, "
                    f"{summary and summary.get('missing_pairs')} pairs missing"), 0
    return fn


def set_host_rate(ctx, i, mbit):
    """Changes VM i's host link (both directions) to mbit, as `emucloud up` shaped it."""
    vm = ctx.tb.truth["vms"][i]
    rack_ns = f"{ctx.tb.prefix}emurack{vm['rack']}"
    for ns, dev in ((vm["name"], "eth0"), (rack_ns, f"v{i}")):
        subprocess.run(["ip", "netns", "exec", ns, "tc", "class", "change", "dev", dev, "parent",
                        "1:", "classid", "1:1", "htb", "rate", f"{mbit}mbit", "ceil",
                        f"{mbit}mbit"], check=True, capture_output=True, timeout=30)


def brownout(ctx):
    def fn():
        coord, vi = ctx.vms[0], 3
        host = 400.0
        set_host_rate(ctx, vi, host * 0.01)
        try:
            rc, dt, summary, err = ctx.agents.probe(coord, "--timeout", "180s", timeout=240)
        finally:
            set_host_rate(ctx, vi, host)
        if rc != 0:
            return False, f"rankmap probe exit {rc}: {err.strip()[-200:]}", 0
        topo = summary["topology"]
        names = [h["name"] for h in topo["hosts"]]
        links = topo.get("links") or {}
        hl = links.get("hosts", [])
        k = names.index(ctx.vms[vi])
        victim_out = hl[k]["out_mbps"] if hl else None
        rack = ctx.tb.truth["vms"][vi]["rack"]
        ups = [u["out_mbps"] for u in (links.get("uplinks") or [[]])[0]]
        # The brown-out is named: the host, at its measured rate. (The bandwidth structure may
        # also give it a group of its own whose uplink is that rate; the name says why.)
        flagged = [d for d in summary.get("degraded_hosts", [])
                   if d.startswith(ctx.vms[vi] + " ")]
        ok = victim_out is not None and victim_out < host * 0.05 and len(flagged) == 1 and \
            len(summary["degraded_hosts"]) == 1 and "degraded host links" in err
        return ok, (f"round in {dt:.1f} s ({summary.get('status')}); degraded_hosts "
                    f"{summary.get('degraded_hosts')}; uplinks {[round(u) for u in ups]} Mbit/s "
                    f"(rack {rack})"), 0
    return fn


def state_full(ctx):
    """The victim's state dir on a 2 MiB tmpfs. Full at start: the agent exits naming its store.
    Full while it runs: a round that pushes a new topology to it ends, the agent stays up and
    logs the store error. Space back: its store opens cleanly and holds its last committed
    topology."""
    def fn():
        coord, victim = ctx.vms[0], ctx.vms[1]
        before = versions(ctx)[victim]
        sdir = os.path.dirname(db_path(ctx, victim))
        keep = ctx.path("state-keep")
        filler = os.path.join(sdir, "filler")

        def fill():
            subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k"], capture_output=True)

        ctx.agents.stop(vms=[victim])
        subprocess.run(["cp", "-a", sdir, keep], check=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2M", "fltstate", sdir], check=True)
        ctx.mounts.append(sdir)
        try:
            subprocess.run(f"cp -a {keep}/. {sdir}/ && rm -rf {keep}", shell=True, check=True)
            fill()
            p = ctx.tb.run("agents", "start", "--prefix", ctx.tb.prefix, "--rankmapd",
                           ctx.agents.rankmapd, "--vm", victim, check=False)
            at_start = (p.stderr.strip().splitlines() or [""])[-1]
            os.remove(filler)
            ctx.agents.start(vms=[victim])
            fill()
            # The victim coordinates: its round record and measurements must be written.
            rc, dt, summary, err = ctx.agents.probe(victim, "--timeout", "120s", timeout=180)
            h = health(ctx, victim)
            log = ctx.agents.log_tail(victim, 40)
            said = [l for l in log.splitlines() if "full" in l.lower()]
            ctx.agents.stop(vms=[victim])
            os.remove(filler)
            ctx.agents.start(vms=[victim])
            h2 = health(ctx, victim)
            ic, v = store_version(db_path(ctx, victim))
            ctx.agents.stop(vms=[victim])
            subprocess.run(["cp", "-a", sdir, keep], check=True)
        finally:
            subprocess.run(["umount", sdir], capture_output=True)
            ctx.mounts.remove(sdir)
        subprocess.run(f"rm -rf {sdir} && mv {keep} {sdir}", shell=True, check=True)
        ctx.agents.start(vms=[victim])
        ok = p.returncode != 0 and "rankmapd.db" in at_start and h is not None \
            and bool(said) and ic == "ok" and h2 is not None and h2["status"] == "ok" and \
            v == before and h2["topology_version"] == before
        return ok, (f"full at start: agent exits: {at_start[-120:]}; full while running: round "
                    f"exit {rc} in {dt:.1f} s, {victim} {'up' if h else 'DOWN'}, logged: "
                    f"{(said or ['nothing'])[-1][-140:]}; space back: store {ic}, newest topology "
                    f"{v} (last committed {before})"), 0
    return fn


def stop_clean(ctx, vm, grace=10):
    """SIGTERM to vm's agent and up to `grace` s for it to close its store (emucloud's stop
    sends SIGKILL after 2 s, which leaves the WAL a killed agent leaves). Returns the seconds it
    took; raises when it did not stop."""
    with open(os.path.join(ctx.tb.state_dir(), "services", f"agents.{vm}.json")) as f:
        pid = json.load(f)["pids"][0]
    t0 = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    if not wait_until(lambda: not os.path.exists(f"/proc/{pid}") or
                      open(f"/proc/{pid}/stat").read().split()[2] == "Z", grace, 0.02):
        raise RuntimeError(f"the agent in {vm} did not stop within {grace} s of SIGTERM")
    dt = time.monotonic() - t0
    ctx.agents.stop(vms=[vm])  # forgets the record
    return dt


def store_damaged(ctx, how):
    def fn():
        victim = ctx.vms[2] if how == "truncated" else ctx.vms[3]
        stop_s = stop_clean(ctx, victim)
        db = db_path(ctx, victim)
        for suffix in ("-wal", "-shm"):
            if os.path.exists(db + suffix):
                ctx.agents.start(vms=[victim])
                raise RuntimeError(f"{db}{suffix} left after a clean stop; log: "
                                   f"{ctx.agents.log_tail(victim, 4)}")
        _, v0 = store_version(db)
        for suffix in ("-wal", "-shm"):  # what the read-only look made: not the agent's
            if os.path.exists(db + suffix):
                os.remove(db + suffix)
        size = os.path.getsize(db)
        with open(db, "r+b") as f:
            if how == "truncated":
                f.truncate(size // 2)
            else:
                f.seek(size // 3)
                f.write(os.urandom(size // 3))
        ctx.agents.start(vms=[victim])
        h = health(ctx, victim)
        status, topo = ctx.agents.get_json(victim, "/v1/topology")
        ic, v = store_version(db)
        aside = h and h.get("store_recovered_from")
        # Either the damage left the last committed topology readable, or the store was moved
        # aside (kept for inspection) and reported; never a crash or an agent that serves errors.
        kept = status == 200 and topo and topo.get("version") == v0
        ok = h is not None and h["status"] == "ok" and ic == "ok" and (kept or bool(aside))
        got = (f"serves version {topo.get('version')}" if kept else
               f"moved aside: {aside and os.path.basename(aside)}")
        return ok, (f"clean stop {stop_s:.1f} s; restarted: {got}"
                    f"; store {ic}; GET /v1/topology {status}"), 0
    return fn


# ------------------------------------------------------------------------------------------


def main():
    args = al.parse_args(add_args)
    tl.require_environment(("ip", "tc", "ethtool", "unshare", "mpirun"))
    for f in (args.rankmap, args.rankmapd, args.shim, args.proof, args.nccl_shim, args.nccl_app):
        if not os.path.exists(f):
            tl.skip(f"{f} not built")
    only = set(args.only.split(",")) if args.only else None
    before = tl.snapshot()
    m = Matrix()
    with tl.Testbed(args.emucloud, args.prefix, kUp) as tb, \
            tempfile.TemporaryDirectory(prefix="rankmap-faults-") as work:
        os.chmod(work, 0o755)
        ctx = Ctx(tb, args, work)
        ctx.rundir = os.path.join(work, "run")
        os.makedirs(ctx.rundir)
        os.chmod(ctx.rundir, 0o755)
        try:
            body(ctx, m, only)
        finally:
            for d in list(ctx.mounts):
                subprocess.run(["umount", d], capture_output=True)
    after = tl.snapshot()
    ours = [n for n in after["netns"] + after["links"]
            if n.startswith(args.prefix + "vm") or n.startswith(args.prefix + "emu")]
    tl.check(not ours, f"no namespace or link of the testbed left ({ours})")
    mounts = open("/proc/mounts").read()
    tl.check("fltstate" not in mounts, "no tmpfs left mounted")
    ok = m.report()
    print("PASS" if ok else "FAIL", flush=True)
    return 0 if ok else 1


def add_args(p):
    p.add_argument("--shim", required=True, help="librankmap_mpi.so")
    p.add_argument("--proof", required=True, help="emucloud_mpi_proof_c")
    p.add_argument("--nccl-shim", required=True, help="librankmap_nccl.so")
    p.add_argument("--nccl-app", required=True, help="shim_nccl_process_app")
    p.add_argument("--prefix", default="flt")
    p.add_argument("--only", default="", help="comma list of row groups: engine, mpi, run, plans, "
                                              "agents, store (default all)")


def body(ctx, m, only):
    def want(g):
        return only is None or g in only

    none = lambda: stray(ctx.tb)  # noqa: E731
    agents_only = lambda: stray(ctx.tb, ("rankmapd",))  # noqa: E731
    ctx.plans = make_plans(ctx)
    eb = f"RANKMAP_TIMEOUT {kEngineTimeoutS} s + {kSlackS} s"
    if want("engine"):
        for algo in ("ring", "tree", "rhd", "hier"):
            m.run(f"kill -9 of rank 2 mid-allreduce, engine {algo}",
                  "every survivor exits non-zero naming the failure", eb, engine_kill(ctx, algo),
                  none)
        m.run("eth0 of rank 1 down mid-allreduce (ring), kept down",
              "every rank exits non-zero naming the failure",
              f"4 x RANKMAP_TIMEOUT + {kSlackS} s", engine_link(ctx, None), none)
        m.run("eth0 of rank 1 down 1 s mid-allreduce (ring), then up",
              "all ranks complete bit-exact, or all fail naming the failure",
              f"4 x RANKMAP_TIMEOUT + {kSlackS} s", engine_link(ctx, 1), none)
    if want("plans"):
        m.run("engine: ranks 0,1 hold plan A, ranks 2,3 plan B",
              "identity order on every rank, warning, exact", eb, engine_plans(ctx, "disagree"),
              none)
        m.run("engine: stale plan (topology from 2020, RANKMAP_PLAN_MAX_AGE=1h)",
              "identity order on every rank, warning, exact", eb, engine_plans(ctx, "stale"), none)
        m.run("NCCL shim (CPU path, NCCL test double): every rank holds plan A (control)",
              "every rank gets its plan rank", eb, nccl_plans(ctx, "agree"), none)
        m.run("NCCL shim (CPU path, NCCL test double): ranks 0,1 hold plan A, ranks 2,3 plan B",
              "identity rank on every rank, warning", eb, nccl_plans(ctx, "disagree"), none)
        m.run("NCCL shim (CPU path, NCCL test double): stale plan (RANKMAP_PLAN_MAX_AGE=1h)",
              "identity rank on every rank, warning", eb, nccl_plans(ctx, "stale"), none)
    if want("mpi") or want("plans") or want("run"):
        plain_reference(ctx)
    if want("mpi"):
        m.run("MPI shim engine mode: kill -9 of rank 2 mid-MPI_Allreduce",
              "mpirun ends non-zero", eb, shim_kill(ctx), none)
    if want("plans"):
        m.run("MPI shim: ranks 0,1 hold plan A, ranks 2,3 plan B",
              "launcher order, results identical to plain, warning", f"60 s + {kSlackS} s",
              shim_plans(ctx, "disagree"), none)
        m.run("MPI shim: stale plan (RANKMAP_PLAN_MAX_AGE=1h)",
              "launcher order, results identical to plain, warning", f"60 s + {kSlackS} s",
              shim_plans(ctx, "stale"), none)
        m.run("rankmap run (launch): stale plan (RANKMAP_PLAN_MAX_AGE=1h)",
              "job runs in provider order, identical results, warning", f"60 s + {kSlackS} s",
              run_plan(ctx, "stale"), none)
        m.run("rankmap run (launch): another job's plan (hosts other0..3)",
              "job runs in provider order, identical results, a line naming the mismatch",
              f"60 s + {kSlackS} s", run_plan(ctx, "other"), none)
    if want("run"):
        for kind in ("unreachable", "slow", "garbage"):
            m.run(f"rankmap run --agent: agent {kind}",
                  "job runs in provider order, identical results, warning naming the agent",
                  f"RANKMAP_RUN_AGENT_TIMEOUT {kRunAgentTimeoutS} s + {kSlackS} s",
                  run_agent(ctx, kind), none)
    if want("agents") or want("store"):
        ctx.agents.start()
        rc, dt, summary, err = ctx.agents.probe(ctx.vms[0], "--timeout", "120s", timeout=180)
        if rc != 0:
            tl.fail(f"the first probe round: exit {rc}: {err[-500:]}")
        print(f"first round: {dt:.1f} s, version {summary['version']}", flush=True)
        rb = f"{kRoundBoundS} s + {kSlackS} s"
        if want("agents"):
            m.run("kill -9 of an agent mid-probe-round",
                  "round ends partial naming it; restarted, it holds its last version", rb,
                  agent_kill(ctx, False), agents_only)
            m.run("kill -9 of the coordinating agent mid-round",
                  "rankmap probe exits non-zero naming the agent; restarted, round not running, "
                  "versions unchanged", rb, agent_kill(ctx, True), agents_only)
            m.run("agent killed and restarted during a round", "round ends ok or partial; store ok",
                  rb, agent_restart(ctx), agents_only)
            m.run("eth0 of a VM down mid-probe-round, then up",
                  "round ends partial naming it; next round complete", rb, probe_link(ctx),
                  agents_only)
            m.run("brown-out: a VM's host link at 1% during a round",
                  "round ends; the host named degraded at its measured rate (~1%)",
                  "rankmap probe --timeout 180 s", brownout(ctx), agents_only)
        if want("store"):
            m.run("state dir full (tmpfs) during a round",
                  "round ends; agent names the store error; space back: store ok, last version",
                  rb, state_full(ctx), agents_only)
            m.run("SQLite file truncated to half between runs",
                  "agent starts; serves the last version or moves the file aside and says so",
                  f"agent start {15} s", store_damaged(ctx, "truncated"), agents_only)
            m.run("SQLite file: its middle third random bytes between runs",
                  "agent starts; serves the last version or moves the file aside and says so",
                  f"agent start {15} s", store_damaged(ctx, "corrupted"), agents_only)
        ctx.agents.stop()
        left = stray(ctx.tb)
        if left:
            m.rows.append(("agents stopped", "no process left", ", ".join(left), 0, False, 0))


if __name__ == "__main__":
    sys.exit(main())
