#!/usr/bin/python3
"""live_plan_bench: live re-planning of the engine measured on the emulated cloud (issue 16's
Done-when). A benchmark, not a CI test: it prints numbers and a JSON summary, and fails only on a
wrong element, an exit, or a missing topology.

Testbed: 8 VMs in 2 racks (4+4), rankmapd in every VM with a periodic re-probe, `rankmap bench
-b 16MiB --duration S -c --json` over the 8 VMs (one rank per VM, launched in the provider's
order by `emucloud mpirun`, the plan applied by the engine, RANKMAP_PLAN_VOTE_EVERY=1: a 16 MiB
call takes about a second here, so a vote per call costs a 32-byte allreduce per second).

Every rank reports its passive measurement to its VM's agent (RANKMAP_TOKEN_FILE, the agents'
token; RANKMAP_PASSIVE_REPORT=--report, RANKMAP_PASSIVE=1 unless said otherwise), so the agents
hold their light checks while the job's traffic is steady and run one when it drifts.

The route a new plan takes (--route):
  agent  (default) RANKMAP_PLAN_FROM_AGENT=1: each rank asks its VM's agent for the job's plan
         every --report seconds (collectives/agent_link.h); the plan file is only the start.
  file   the plan file (RANKMAP_PLAN / --plan), replaced atomically by this script's relay
         thread: once a second it asks the coordinator's agent for its topology version
         (GET /v1/health) and, when a new version is published, for the job's plan and renames
         it over the plan file (what `rankmap plan` plus a rename does by hand).
The engine's side (vote, judgeSwitch, the switch) is the product's in both.

Scenarios (each a separate job; --scenarios picks):
  migrate   the job starts in plan order on 4+4; after --before seconds one VM in the middle
            of its rack's segment of the ring moves to the other rack (`emucloud migrate`,
            4+4 -> 5+3); the job runs --after more seconds. Run with live re-planning on, then
            (after the VM moved back and the agents published again) with RANKMAP_LIVE_PLAN=0;
            a fresh job with the agents' plan for the new layout is measured after each.
  noise     as migrate, but the change is another tenant's flow saturating one VM's host
            link (`emucloud noise --from VM --to tenant`); on, off, and clean as reference.
  steady    nothing changes for --steady seconds: plan switches counted, and the probe
            traffic as a fraction of the job's (the VMs' interface byte counters with the agents
            re-probing, against the job's payload bytes, net of the bytes per payload byte of
            the same job with the agents stopped). Then --overhead-runs pairs of
            --overhead-seconds jobs with RANKMAP_PASSIVE=1 and =0, interleaved, agents running:
            the busbw with passive measurement on against off.

Usage: live_plan_bench.py --emucloud E --rankmap R --rankmapd D [--scenarios migrate,noise,steady]
"""

import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents_lib as al  # noqa: E402
import emucloud_testlib as lib  # noqa: E402

kSize = 16 << 20


def extra(p):
    lib.add_testbed_args(p, host_mbit="400", uplink_mbit="100", seed=5)
    p.add_argument("--prefix", default="elive")
    p.add_argument("--interval", default="5s", help="the agents' periodic re-probe interval")
    p.add_argument("--before", type=float, default=30, help="seconds before the change")
    p.add_argument("--after", type=float, default=60, help="seconds after the change")
    p.add_argument("--fresh", type=float, default=30, help="seconds of each fresh job")
    p.add_argument("--steady", type=float, default=300, help="seconds of the steady run")
    p.add_argument("--noise-mbit", type=float, default=700)
    p.add_argument("--noise-udp", action="store_true",
                   help="the tenant flow is a UDP blaster (emucloud noise --udp), which takes the "
                        "host link from the job's TCP flows instead of sharing it")
    p.add_argument("--scenarios", default="migrate,noise,steady")
    p.add_argument("--migrate-algo", default="ring",
                   help="the migrate runs' --algo: ring, where the order alone sets the rate")
    p.add_argument("--noise-algo", default="auto",
                   help="the noise and steady runs' --algo (auto: the plan's, e.g. hier with "
                        "uneven chunks)")
    p.add_argument("--out", default="", help="write the summary JSON here too")
    p.add_argument("--out-dir", default="", help="keep every plan the relay wrote here")
    p.add_argument("--port", type=int, default=29600)
    p.add_argument("--route", default="agent", choices=("agent", "file"),
                   help="how a new plan reaches the job (see above)")
    p.add_argument("--report", default="2s", help="RANKMAP_PASSIVE_REPORT of the job")
    p.add_argument("--overhead-runs", type=int, default=3)
    p.add_argument("--overhead-seconds", type=float, default=40)
    p.add_argument("--overhead-agents", default="on", choices=("on", "off"),
                   help="off: the overhead pairs run with the agents stopped, so that passive "
                        "on and off differ only by the engine's counting and its failed "
                        "reports (with them running, off also means un-held light checks)")


def load():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


class Relay:
    """The re-planner of the file route: a new topology version at the coordinator's agent
    becomes the job's plan, renamed over `path`."""

    def __init__(self, agents, vm0, hosts, path, keep_dir=""):
        self.agents, self.vm0, self.hosts, self.path = agents, vm0, hosts, path
        self.keep_dir = keep_dir
        self.version = None
        self.events = []  # (monotonic, version, plan hash)
        self.stop_ = threading.Event()
        self.thread = None

    def fetch(self):
        """The agent's plan for the job at its latest version; returns (version, plan dict)."""
        status, h = self.agents.get_json(self.vm0, "/v1/health")
        if status != 200 or not h.get("topology_version"):
            return None, None
        v = h["topology_version"]
        status, text = self.agents.http(self.vm0, "GET", "/v1/plan?hosts=" + ",".join(self.hosts),
                                        token=self.agents.token())
        if status != 200:
            print(f"relay: GET /v1/plan: {status} {text[:200]}", flush=True)
            return v, None
        return v, json.loads(text)

    def write(self, plan):
        if self.keep_dir:  # every plan the job was offered and its topology, for the report
            with open(os.path.join(self.keep_dir, f"plan-v{plan['epoch']}.json"), "w") as f:
                json.dump(plan, f)
            status, text = self.agents.http(self.vm0, "GET", "/v1/topology")
            if status == 200:
                with open(os.path.join(self.keep_dir, f"topology-v{plan['epoch']}.json"),
                          "w") as f:
                    f.write(text)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(plan, f)
        os.chmod(tmp, 0o644)
        os.rename(tmp, self.path)

    def refresh(self):
        v, plan = self.fetch()
        if plan is not None and v != self.version:
            self.version = v
            self.write(plan)
            self.events.append((time.monotonic(), v, plan["hash"]))
            print(f"relay: version {v}: plan {plan['hash'][:19]} epoch {plan['epoch']} order "
                  f"{' '.join(plan['order'])}", flush=True)
        return plan

    def run(self):
        while not self.stop_.wait(1.0):
            try:
                self.refresh()
            except Exception as e:  # noqa: BLE001 - a failed poll is retried next second
                print(f"relay: {e}", flush=True)

    def start(self):
        self.stop_.clear()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def stop(self):
        self.stop_.set()
        if self.thread:
            self.thread.join()


class Job:
    """`rankmap bench --duration` over every VM, in the background; rows with their arrival
    time (monotonic)."""

    def __init__(self, tb, args, plan_path, seconds, live, port, algo="auto", passive=True,
                 token_file=""):
        env = dict(os.environ)
        for k in ("RANKMAP_PLAN", "RANKMAP_TOPOLOGY", "LD_PRELOAD", "RANKMAP_ALGO"):
            env.pop(k, None)
        root = tb.truth["vms"][0]["address"]
        words = ["-x", f"RANKMAP_ROOT={root}:{port}", "-x", "RANKMAP_PLAN_VOTE_EVERY=1",
                 "-x", f"RANKMAP_LIVE_PLAN={1 if live else 0}", "-x", "RANKMAP_TIMEOUT=120s",
                 "-x", f"RANKMAP_PASSIVE={1 if passive else 0}",
                 "-x", f"RANKMAP_PASSIVE_REPORT={args.report}",
                 "-x", f"RANKMAP_PLAN_FROM_AGENT={1 if args.route == 'agent' else 0}",
                 "-x", f"RANKMAP_TOKEN_FILE={token_file}",
                 args.rankmap, "bench", "-b", str(kSize), "--duration", str(seconds), "-w", "1",
                 "--check", "--json", "--plan", plan_path, "--algo", algo]
        argv = tb.cmd("mpirun", "--prefix", tb.prefix, "--timeout", str(seconds + 180), "--",
                      *words)
        self.rows, self.summary, self.err = [], None, ""
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self):
        for line in self.proc.stdout:
            if not line.startswith("{"):
                continue
            j = json.loads(line)
            j["t"] = time.monotonic()
            if j.get("summary"):
                self.summary = j
            else:
                self.rows.append(j)

    def wait(self):
        self.err = self.proc.stderr.read()
        rc = self.proc.wait()
        self.reader.join()
        if rc != 0 or self.summary is None:
            lib.fail(f"rankmap bench: exit {rc}: {self.err[-3000:]}")
        wrong = sum(r["wrong"] for r in self.rows if r["wrong"] > 0)
        if wrong or self.summary["wrong"] != 0:
            lib.fail(f"rankmap bench: {wrong} wrong elements ({self.summary})")
        return self


def busbw(rows, t_from=None, t_to=None):
    xs = [r["busbw_gbps"] * 8000 for r in rows  # Mbit/s
          if (t_from is None or r["t"] >= t_from) and (t_to is None or r["t"] <= t_to)]
    return (statistics.median(xs) if xs else None), len(xs)


def tx_bytes(tb):
    """Bytes sent by every VM's interfaces (lo excluded), from /proc/net/dev in each VM."""
    total = 0
    for vm in tb.truth["vms"]:
        p = subprocess.run(tb.exec_argv(vm["name"], "cat", "/proc/net/dev"), capture_output=True,
                           text=True, timeout=30, check=True)
        for line in p.stdout.splitlines()[2:]:
            name, _, rest = line.partition(":")
            if name.strip() != "lo":
                total += int(rest.split()[8])
    return total


def switches(rows):
    """(first arrival time of each new plan hash after the first row, epoch, hash)."""
    out, last = [], rows[0]["plan_hash"] if rows else None
    for r in rows:
        if r["plan_hash"] != last:
            out.append((r["t"], r["plan_epoch"], r["plan_hash"]))
            last = r["plan_hash"]
    return out


def true_racks(tb):
    with open(os.path.join(tb.state_dir(), "truth.json")) as f:
        return {vm["name"]: vm["rack"] for vm in json.load(f)["vms"]}


def noise_logs(tb, victim):
    """The noise flows' iperf3 server logs touching `victim`, with their sizes now (emucloud
    appends a later flow on the same pair and port to the same file)."""
    services = os.path.join(tb.state_dir(), "services")
    logs = (glob.glob(os.path.join(services, f"noise.{victim}-*.server.log"))
            + glob.glob(os.path.join(services, f"noise.*-{victim}-*.server.log")))
    return {f: os.path.getsize(f) for f in logs}


def tenant_mbit(tb, victim, since):
    """What the noise flow touching `victim` delivered: the median of the intervals its
    iperf3 server (the receiving end) logged, Mbit/s, or None without a log; and its whole run's
    (Mbit/s, UDP loss %) from the server's summary line once the flow has stopped, or None; read
    from the sizes in `since` (noise_logs before the flow started) on. A TCP tenant can
    yield to the job's flows, so the rate asked for is no measure of the load it put on the link
    (docs/performance.md)."""
    logs = [f for f, size in noise_logs(tb, victim).items() if size > since.get(f, 0)]
    if not logs:
        return None, None
    rates, whole = [], None
    with open(max(logs, key=os.path.getmtime), errors="replace") as f:
        f.seek(since.get(f.name, 0))
        for line in f:
            m = re.search(r"sec\s+[\d.]+ \w?Bytes\s+([\d.]+) ([KMG]?)bits/sec", line)
            if not m or "sender" in line:
                continue
            mbit = float(m.group(1)) * {"K": 1e-3, "": 1e-6, "M": 1, "G": 1e3}[m.group(2)]
            if "receiver" in line:
                lost = re.search(r"\(([\d.]+)%\)", line)
                whole = (mbit, float(lost.group(1)) if lost else None)
            else:
                rates.append(mbit)
    return (statistics.median(rates) if rates else None), whole


def link_sent_bytes(vm):
    """Bytes `vm`'s host link has carried out of it: its eth0 HTB class 1:1 (emucloud's
    tc_single_rate, or tc_shared_host_link's parent while a tenant flow shares the link),
    whatever flow sent them. The counter restarts when emucloud reshapes the link."""
    out = subprocess.run(["ip", "netns", "exec", vm, "tc", "-s", "class", "show", "dev", "eth0"],
                         capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"class htb 1:1 .*?\n\s*Sent (\d+) bytes", out)
    return int(m.group(1)) if m else None


def settled_plan(relay, tb, timeout=120):
    """The agents' plan once it runs through the testbed's racks contiguously (the known start
    of a run: a re-probe that met earlier traffic may have published a topology whose groups
    are off); returns (plan, version). After `timeout` s, the plan as it is, with a warning."""
    deadline = time.monotonic() + timeout
    while True:
        relay.version = None
        p = relay.refresh()
        rack = true_racks(tb)
        order = p["order"]
        crossings = sum(rack[order[i]] != rack[order[i - 1]] for i in range(len(order)))
        if crossings <= 2 or time.monotonic() > deadline:
            if crossings > 2:
                print(f"warning: the agents' plan crosses between racks {crossings} times",
                      flush=True)
            return p, relay.version
        time.sleep(5)


def wait_new_version(agents, vm0, above, timeout=180):
    v = agents.wait_version(vm0, above, timeout)
    if not v:
        lib.fail(f"no topology version above {above} in {timeout} s\n{agents.log_tail(vm0, 40)}")
    return v


def main():
    args = al.parse_args(extra)
    lib.require_environment(("ip", "tc", "ethtool", "unshare", "mpirun", "iperf3"))
    args.rankmap = os.path.abspath(args.rankmap)
    up = lib.up_args(args)
    out = {"load_start": load(), "args": vars(args)}
    with lib.Testbed(args.emucloud, args.prefix, up) as tb, \
            tempfile.TemporaryDirectory(prefix="rankmap-live-bench-") as tmp:
        os.chmod(tmp, 0o755)
        plan_path = os.path.join(tmp, "plan.json")
        agents = al.Agents(tb, args.rankmapd, args.rankmap)
        agents.start("--interval", args.interval)
        vm0 = tb.truth["vms"][0]["name"]
        hosts = [vm["name"] for vm in tb.truth["vms"]]
        rack = {vm["name"]: vm["rack"] for vm in tb.truth["vms"]}
        wait_new_version(agents, vm0, 0)
        if args.out_dir:
            os.makedirs(args.out_dir, exist_ok=True)
        relay = Relay(agents, vm0, hosts, plan_path, args.out_dir)
        p0 = relay.refresh()
        if p0 is None:
            lib.fail("no plan from the agent")
        print(f"plan 0: order {' '.join(p0['order'])} racks {[rack[h] for h in p0['order']]}",
              flush=True)
        port = [args.port]

        def job(seconds, live, path=plan_path, algo="auto", passive=True):
            port[0] += 1
            return Job(tb, args, path, seconds, live, port[0], algo, passive,
                       agents.file("token"))

        def relay_start():
            if args.route == "file":
                relay.start()

        def fresh(name, algo):
            """A fresh job with the agents' plan for the current layout."""
            relay.refresh()
            fpath = os.path.join(tmp, f"fresh-{name}.json")
            with open(plan_path) as f, open(fpath, "w") as g:
                g.write(f.read())
            os.chmod(fpath, 0o644)
            j = job(args.fresh, True, fpath, algo).wait()
            bw, n = busbw(j.rows, j.rows[min(2, len(j.rows) - 1)]["t"])
            print(f"{name}: fresh job {bw:.0f} Mbit/s busbw (median of {n} rows), plan "
                  f"{j.rows[-1]['plan_hash'][:19]} {j.rows[-1]['algo']}, rows "
                  + " ".join(str(round(x["busbw_gbps"] * 8000)) for x in j.rows)
                  + f", load {load()}", flush=True)
            return bw

        def changed_run(name, live, change, undo, algo, watch=None):
            """A job over a change at --before seconds; returns its figures. With `watch` (a VM)
            and --out-dir, that VM's agent's view of the job traffic (GET /v1/observations) is
            kept every 2 s for the report (one call at a time: a few ms of CPU each)."""
            relay_start()
            j = job(args.before + args.after, live, algo=algo)
            seen, stop = [], threading.Event()

            def watcher():
                while not stop.wait(2.0):
                    try:
                        st, text = agents.http(watch, "GET", "/v1/observations")
                        seen.append({"t": round(time.monotonic() - j.t0, 1), "status": st,
                                     "summary": json.loads(text) if st == 200 else text})
                    except Exception as e:  # the report only; the run goes on
                        seen.append({"t": round(time.monotonic() - j.t0, 1), "error": str(e)})

            w = None
            if watch and args.out_dir:
                w = threading.Thread(target=watcher, daemon=True)
                w.start()
            # The change at --before seconds after the first row.
            while not j.rows and j.proc.poll() is None:
                time.sleep(0.2)
            time.sleep(max(0.0, args.before - (time.monotonic() - j.rows[0]["t"])))
            t_change = time.monotonic()
            change()
            print(f"{name}: change at {t_change - j.t0:.1f} s into the job", flush=True)
            j.wait()
            relay.stop()
            stop.set()
            if w:
                w.join()
            before, nb = busbw(j.rows, j.rows[min(2, len(j.rows) - 1)]["t"], t_change)
            after30, na = busbw(j.rows, t_change + 30)
            sw = switches(j.rows)
            r = {"live": live, "busbw_before_mbit": before, "busbw_after30_mbit": after30,
                 "rows_after30": na, "switches": [(round(t - t_change, 1), e, h[:19])
                                                  for t, e, h in sw],
                 "relay": [(round(t - t_change, 1), v, h[:19]) for t, v, h in relay.events
                           if t >= t_change],
                 "summary": j.summary, "algo": algo,
                 "rows": [(round(x["t"] - t_change, 1), round(x["busbw_gbps"] * 8000),
                           x["wrong"], x["plan_hash"][:19], x["algo"]) for x in j.rows],
                 "load": load()}
            print(f"{name}: busbw before {before:.0f}, 30 s after the change {after30:.0f} "
                  f"Mbit/s (median of {na} rows); switches (s after the change) {r['switches']}; "
                  f"relay {r['relay']}; votes {j.summary['plan_votes']}; checked rows "
                  f"{sum(1 for x in j.rows if x['wrong'] == 0)} wrong 0; load {r['load']}",
                  flush=True)
            print("  rows (s after the change:Mbit/s:algo): "
                  + " ".join(f"{t}:{b}:{a}" for t, b, _, _, a in r["rows"]), flush=True)
            if args.out_dir:
                keep_history(name, t_change - j.t0, {"vm": watch, "views": seen} if watch else None)
            undo()
            return r

        def keep_history(name, change_s, observations=None):
            """The coordinator's rounds and every topology version so far, for the report:
            which round made the version a job switched to; the coordinator's agent log beside
            it, and `observations` (changed_run's watch) when given."""
            status, text = agents.http(vm0, "GET", "/v1/rounds?limit=100")
            doc = {"change_s_into_job": change_s, "rounds": json.loads(text) if status == 200
                   else text, "topologies": {}, "observations": observations}
            base = re.sub(r"[^a-z0-9]+", "-", name)
            with open(os.path.join(args.out_dir, base + "-coordinator.log"), "w") as f:
                f.write(agents.log_tail(vm0, 2000))
            status, text = agents.http(vm0, "GET", "/v1/topologies?limit=100")
            for v in (json.loads(text).get("versions", []) if status == 200 else []):
                num = v.get("version")
                st, t = agents.http(vm0, "GET", f"/v1/topology?version={num}")
                if st == 200:
                    doc["topologies"][str(num)] = json.loads(t)
            with open(os.path.join(args.out_dir, base + "-history.json"), "w") as f:
                json.dump(doc, f)

        scen = args.scenarios.split(",")
        if "migrate" in scen:
            mig = {}
            for live in (True, False):
                name = f"migrate live={'on' if live else 'off'}"
                p, v = settled_plan(relay, tb)  # the plan for 4+4, the job's start
                # A VM inside its rack's segment of this plan's ring: both of its ring
                # neighbours are rack-mates, so in this order after the move both of its ring
                # edges cross the uplinks (each uplink then carries two flows a direction).
                order = p["order"]
                rack = true_racks(tb)
                m = next(order[i] for i in range(len(order))
                         if rack[order[i]] == rack[order[i - 1]]
                         == rack[order[(i + 1) % len(order)]])
                home, away = rack[m], 1 - rack[m]
                print(f"{name}: plan {p['hash'][:19]} racks {[rack[h] for h in order]}; "
                      f"moving {m} (rack {home} -> {away})", flush=True)

                def change():
                    tb.run("migrate", "--prefix", tb.prefix, m, str(away))

                def undo():
                    pass

                r = changed_run(name, live, change, undo, args.migrate_algo)
                r["vm"] = m
                vnew = wait_new_version(agents, vm0, v)
                r["fresh_mbit"] = fresh(name, args.migrate_algo)
                r["ratio_after30_to_fresh"] = r["busbw_after30_mbit"] / r["fresh_mbit"]
                mig["on" if live else "off"] = r
                # Back to 4+4 for the next run, and the agents' plan for it.
                tb.run("migrate", "--prefix", tb.prefix, m, str(home))
                wait_new_version(agents, vm0, vnew)
            out["migrate"] = mig
        if "noise" in scen:
            order = p0["order"]
            victim = order[1]
            print(f"noise: tenant flow of {args.noise_mbit} Mbit/s out of {victim}", flush=True)
            noi = {}
            for live in (True, False):
                name = f"noise live={'on' if live else 'off'}"
                # Both runs start from a plan through the racks: re-probes during the first
                # run's noise may have published a topology without them (the off run of
                # 2026-11-28 started from such a plan, in the input order; docs/performance.md).
                p, v = settled_plan(relay, tb)
                print(f"{name}: plan {p['hash'][:19]} (version {v}) racks "
                      f"{[true_racks(tb)[h] for h in p['order']]}", flush=True)
                if p.get("ring_weights"):
                    print(f"warning: {name} starts from a plan with ring weights "
                          f"{p['ring_weights']}: made while a tenant loaded a link, so this run "
                          f"does not start from the quiet network's plan", flush=True)

                link = {}

                def change():
                    link["logs"] = noise_logs(tb, victim)
                    tb.run("noise", "start", "--prefix", tb.prefix, "--from", victim, "--to",
                           "tenant", "--mbit", str(args.noise_mbit),
                           *(["--udp"] if args.noise_udp else []))
                    # After the start: it gives the link a class for the tenant (a new qdisc).
                    link["from"] = (time.monotonic(), link_sent_bytes(victim))

                def undo():
                    link["to"] = (time.monotonic(), link_sent_bytes(victim))
                    tb.run("noise", "stop", "--prefix", tb.prefix, "--to", "tenant")

                r = changed_run(name, live, change, undo, args.noise_algo, watch=victim)
                r["tenant_mbit"], r["tenant_whole"] = tenant_mbit(tb, victim, link["logs"])
                (t0, b0), (t1, b1) = link["from"], link["to"]
                r["victim_link_mbit"] = ((b1 - b0) * 8 / 1e6 / (t1 - t0)
                                         if b0 is not None and b1 is not None else None)
                pos = p["order"].index(victim)
                r["victim_neighbours"] = [p["order"][pos - 1],
                                          p["order"][(pos + 1) % len(p["order"])]]
                print(f"{name}: the tenant's flow delivered {r['tenant_mbit']} Mbit/s "
                      f"(median of its 1 s intervals; whole run, Mbit/s and loss %: "
                      f"{r['tenant_whole']}); the victim's host link carried "
                      f"{r['victim_link_mbit']} Mbit/s out of it in all from the change to the "
                      f"job's end; its ring neighbours in the plan {r['victim_neighbours']}",
                      flush=True)
                noi["on" if live else "off"] = r
                # The agents publish after the noise stops only if they saw it (a flow that
                # did not move the job's rates is held through): wait a while, not forever, for
                # a version newer than the last one of the run (one published during the noise
                # would start the next run from the tenant's plan: the off run of 11:00,
                # docs/performance.md).
                status, h = agents.get_json(vm0, "/v1/health")
                last = h.get("topology_version") or v if status == 200 else v
                if not agents.wait_version(vm0, last, 60):
                    print(f"{name}: no new topology version after the noise stopped", flush=True)
            on, off = noi["on"], noi["off"]
            lost = off["busbw_before_mbit"] - off["busbw_after30_mbit"]
            noi["lost_mbit"] = lost
            # Each run against its own start (the two runs start from different plans and rates):
            # kept = after / before; recovered = the part of live off's loss that live on kept,
            # (kept_on - kept_off) / (1 - kept_off). Without a switch after the change nothing
            # was re-planned for it (a switch before it changed the run's start).
            kept_on = on["busbw_after30_mbit"] / on["busbw_before_mbit"]
            kept_off = off["busbw_after30_mbit"] / off["busbw_before_mbit"]
            noi["kept_on"], noi["kept_off"] = kept_on, kept_off
            noi["recovered_fraction"] = ((kept_on - kept_off) / (1 - kept_off)
                                         if kept_off < 1 and any(t >= 0 for t, _, _ in
                                                                 on["switches"]) else None)
            print(f"noise: live off kept {kept_off:.2f} of its busbw (lost {lost:.0f} Mbit/s), "
                  f"live on {kept_on:.2f} after {len(on['switches'])} switch(es); recovered "
                  f"{noi['recovered_fraction']}", flush=True)
            out["noise"] = noi
        if "steady" in scen:
            relay.version = None
            relay.refresh()
            st = {}
            # The job alone (agents stopped): wire bytes per payload byte.
            agents.stop()
            for agents_on in (False, True):
                if agents_on:
                    agents.start("--interval", args.interval)
                    time.sleep(2 * float(args.interval.rstrip("s")))
                    relay_start()
                seconds = args.steady if agents_on else min(60.0, args.steady)
                b0 = tx_bytes(tb)
                j = job(seconds, True, algo=args.noise_algo)
                j.wait()
                b1 = tx_bytes(tb)
                relay.stop()
                # Ring/hier allreduce: each rank sends 2 (n-1)/n of the buffer per call: the
                # rows' calls, one checked call per row and the warm-up call.
                n = len(hosts)
                calls = sum(r["iters"] for r in j.rows) + len(j.rows) + 1
                payload = calls * n * 2 * (n - 1) / n * kSize
                bw, nr = busbw(j.rows, j.rows[min(2, len(j.rows) - 1)]["t"])
                key = "agents_on" if agents_on else "agents_off"
                st[key] = {"seconds": seconds, "busbw_mbit": bw, "rows": nr,
                           "switches": j.summary["plan_switches"],
                           "votes": j.summary["plan_votes"], "wire_bytes": b1 - b0,
                           "payload_bytes": payload, "wire_per_payload": (b1 - b0) / payload,
                           "load": load()}
                print(f"steady agents {'on' if agents_on else 'off'}: {seconds:.0f} s, busbw "
                      f"{bw:.0f} Mbit/s, {j.summary['plan_switches']} switches, "
                      f"{j.summary['plan_votes']} votes, wire/payload "
                      f"{(b1 - b0) / payload:.4f}, load {load()}", flush=True)
            st["probe_fraction"] = (st["agents_on"]["wire_per_payload"]
                                    - st["agents_off"]["wire_per_payload"])
            print(f"steady: probe traffic {100 * st['probe_fraction']:.2f}% of the job's",
                  flush=True)
            # Passive measurement's cost: interleaved jobs with it on and off.
            if args.overhead_agents == "off":
                agents.stop()
            over = {"on": [], "off": []}
            for k in range(args.overhead_runs):
                for passive in ((True, False) if k % 2 == 0 else (False, True)):
                    relay_start()
                    j = job(args.overhead_seconds, True, algo=args.noise_algo,
                            passive=passive).wait()
                    relay.stop()
                    bw, nr = busbw(j.rows, j.rows[min(2, len(j.rows) - 1)]["t"])
                    over["on" if passive else "off"].append(bw)
                    print(f"overhead run {k}: passive {'on' if passive else 'off'}: busbw "
                          f"{bw:.0f} Mbit/s ({nr} rows), {j.summary['plan_switches']} switches, "
                          f"reports sent {j.summary.get('agent_reports_sent')}, load {load()}",
                          flush=True)
            if over["on"] and over["off"]:
                on_m, off_m = statistics.median(over["on"]), statistics.median(over["off"])
                st["overhead"] = {"agents": args.overhead_agents,
                                  "on_mbit": over["on"], "off_mbit": over["off"],
                                  "on_median": on_m, "off_median": off_m,
                                  "on_over_off": on_m / off_m}
                print(f"steady: busbw passive on {on_m:.0f} / off {off_m:.0f} Mbit/s = "
                      f"{on_m / off_m:.3f}", flush=True)
            out["steady"] = st
        agents.stop()
    out["load_end"] = load()
    text = json.dumps(out)
    print("SUMMARY " + text, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
