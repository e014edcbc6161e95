#!/usr/bin/python3
"""rankmapd on the testbed under failures and bad input.

- an agent killed (SIGKILL) mid-round: the round finishes within its deadline, that host's
  pairs missing; restarted, it still serves the topology it had (nothing stored is lost);
- a corrupt SQLite file: moved aside (kept byte for byte), reported, a fresh store started;
- wrong or missing bearer token (401, `rankmap probe` exits 2); `rankmap probe` coordinating
  the round itself with the job's key (every pair measured), and with a wrong key (rejected
  and counted by the agents), malformed/duplicate hosts files (exit 2), an unreachable host
  (its pairs missing, the round finishes).
"""

import json
import os
import subprocess
import sys
import time

import agents_lib as al
import emucloud_testlib as tl


def extra(p):
    p.add_argument("--prefix", default="agfail")


def probe_cli(tb, agents, vm, *words, timeout=300):
    argv = tb.exec_argv(vm, agents.rankmap, "probe", *words)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def main():
    args = al.parse_args(extra)
    tl.require_environment()
    up = ["--vms", "8", "--racks", "2", "--host-mbit", "1000", "--uplink-mbit", "250",
          "--seed", "5"]
    with tl.Testbed(args.emucloud, args.prefix, up) as tb:
        agents = al.Agents(tb, args.rankmapd, args.rankmap)
        agents.start()
        vms = [v["name"] for v in tb.truth["vms"]]
        vm0, victim, corrupt = vms[0], vms[5], vms[6]
        sd = tb.state_dir()

        # A complete round first: every agent stores version 1.
        rc, _, summary, err = agents.probe(vm0)
        if rc != 0:
            tl.fail(f"first round: exit {rc}: {err[-500:]}")
        tl.check(summary["version"] == 1, "first round published version 1")
        _, t_before = agents.get_json(victim, "/v1/topology")
        tl.check(t_before is not None and t_before["version"] == 1,
                 f"{victim} has the pushed version 1")

        # Kill one agent while the round measures (its structure or links phase).
        status, text = agents.http(vm0, "POST", "/v1/probe", "{}", agents.token())
        tl.check(status == 202, f"POST /v1/probe -> {status}")
        rid = json.loads(text)["round_id"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            _, st = agents.get_json(vm0, f"/v1/rounds/{rid}")
            if st["status"] != "running" or st["phase"] in ("structure", "links"):
                break
            time.sleep(0.1)
        tl.check(st["status"] == "running", f"round {rid} reached phase {st['phase']}")
        agents.stop(vms=[victim], kill=True)
        t_kill = time.monotonic()
        while time.monotonic() < t_kill + 120:
            _, st = agents.get_json(vm0, f"/v1/rounds/{rid}")
            if st["status"] != "running":
                break
            time.sleep(0.2)
        took = time.monotonic() - t_kill
        al.report(f"measured: round {rid} finished {took:.1f} s after the kill: {st['status']}, "
                  f"{st['error']}")
        tl.check(st["status"] == "partial", f"round {rid} finished as partial ({st['status']})")
        tl.check(took < 60, f"round finished {took:.1f} s after the kill (< 60 s)")
        tl.check(victim in st["error"], f"the round names {victim} as not answering")
        _, t2 = agents.get_json(vm0, "/v1/topology")
        vi = [h["name"] for h in t2["hosts"]].index(victim)
        missing = sum(1 for j in range(len(vms)) if j != vi and
                      t2["bandwidth_mbps"][vi][j] is None and t2["bandwidth_mbps"][j][vi] is None)
        others = sum(1 for i in range(len(vms)) for j in range(len(vms))
                     if i != j and vi not in (i, j) and t2["bandwidth_mbps"][i][j] is None)
        tl.check(missing >= 1, f"{missing} of {victim}'s pairs have no bandwidth")
        tl.check(others == 0, f"every pair without {victim} is measured ({others} missing)")

        # Restart: nothing stored is lost.
        agents.start(vms=[victim])
        status, t_after = agents.get_json(victim, "/v1/topology?version=1")
        tl.check(status == 200 and t_after == t_before,
                 f"restarted {victim} still serves topology version 1")

        # Corrupt store: moved aside, reported, fresh store.
        agents.stop(vms=[corrupt])
        db = os.path.join(sd, "agents", "state", corrupt, "rankmapd.db")
        junk = b"this is not an sqlite database " * 300
        with open(db, "wb") as f:
            f.write(junk)
        for suffix in ("-wal", "-shm"):
            if os.path.exists(db + suffix):
                os.remove(db + suffix)
        agents.start(vms=[corrupt])
        _, h = agents.get_json(corrupt, "/v1/health")
        aside = h.get("store_recovered_from")
        tl.check(bool(aside) and ".corrupt-" in aside, f"corrupt store reported: {aside}")
        with open(aside, "rb") as f:
            tl.check(f.read() == junk, "the corrupt file was moved aside unchanged")
        tl.check(h["status"] == "ok" and h["topology_version"] is None,
                 "the agent runs on a fresh store")

        # Tokens.
        status, _ = agents.http(vm0, "POST", "/v1/probe", "{}", "")
        tl.check(status == 401, f"no token -> {status}")
        status, _ = agents.http(vm0, "POST", "/v1/probe", "{}", "wrong-token-0123456789")
        tl.check(status == 401, f"wrong token -> {status}")
        wrong = os.path.join(sd, "wrong-token")
        # Secret files are private to their owner (rankmap refuses group/other bits).
        with open(os.open(wrong, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("wrong-token-0123456789\n")
        p = probe_cli(tb, agents, vm0, "--hosts", agents.file("hosts"), "--agent",
                      "http://127.0.0.1:7410", "--token-file", wrong, "--out", os.path.join(sd, "x.json"))
        tl.check(p.returncode == 2 and "token" in p.stderr,
                 f"rankmap probe with a wrong token: exit {p.returncode}: {p.stderr.strip()[:200]}")

        # No agent asked: `rankmap probe` coordinates the round itself with the job's key.
        selfout = os.path.join(sd, "self.json")
        p = probe_cli(tb, agents, vm0, "--hosts", agents.file("hosts"), "--key-file",
                      agents.file("probe.key"), "--out", selfout, "--json", "--timeout", "120s")
        tl.check(p.returncode == 0, f"rankmap probe coordinating itself: exit {p.returncode}"
                                    + (f": {p.stderr.strip()[-300:]}" if p.returncode else ""))
        with open(selfout) as f:
            topo = json.load(f)
        missing = [(i, j) for i, row in enumerate(topo["bandwidth_mbps"]) for j, v in enumerate(row)
                   if i != j and v is None]
        tl.check(len(topo["hosts"]) == len(vms) and not missing,
                 f"self-coordinated round: {len(topo['hosts'])} hosts, {len(missing)} pairs missing")

        # Wrong probe key: rejected and counted by the agents.
        wrong_key = os.path.join(sd, "wrong.key")
        with open(os.open(wrong_key, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("0" * 64 + "\n")
        p = probe_cli(tb, agents, vm0, "--hosts", agents.file("hosts"),
                      "--key-file", wrong_key, "--out", os.path.join(sd, "y.json"), "--timeout", "60s")
        tl.check(p.returncode == 1, f"a round with the wrong key fails: exit {p.returncode}: "
                                    f"{p.stderr.strip()[-200:]}")
        _, metrics = agents.http(vms[1], "GET", "/metrics")
        line = [l for l in metrics.splitlines()
                if l.startswith('rankmap_probe_auth_rejections_total{reason="bad_mac"}')]
        tl.check(line and float(line[0].split()[-1]) >= 1, f"wrong key counted: {line}")

        # Bad hosts files.
        for name, content, want in (("malformed", "vmx\n", "expected"),
                                    ("duplicate", f"a {tb.truth['vms'][1]['address']}\n"
                                                  f"a {tb.truth['vms'][2]['address']}\n", "duplicate"),
                                    ("names", "a host.example\n", "numeric")):
            path = os.path.join(sd, f"hosts.{name}")
            with open(path, "w") as f:
                f.write(content)
            p = probe_cli(tb, agents, vm0, "--hosts", path, "--agent", "http://127.0.0.1:7410",
                          "--token-file", agents.file("token"), "--out", os.path.join(sd, "z.json"))
            tl.check(p.returncode == 2 and want in p.stderr,
                     f"{name} hosts file: exit {p.returncode}: {p.stderr.strip()[:160]}")

        # An unreachable host: its pairs are missing, the round completes.
        subnet_base = tb.truth["head"]["address"].rsplit(".", 2)[0]
        gone = f"{subnet_base}.1.250"
        path = os.path.join(sd, "hosts.unreachable")
        with open(agents.file("hosts")) as f:
            lines = f.read().splitlines()[:4]
        with open(path, "w") as f:
            f.write("\n".join(lines + [f"ghost {gone}:7411"]) + "\n")
        t0 = time.monotonic()
        p = probe_cli(tb, agents, vm0, "--hosts", path, "--agent", "http://127.0.0.1:7410",
                      "--token-file", agents.file("token"), "--out", os.path.join(sd, "u.json"),
                      "--json")
        dt = time.monotonic() - t0
        ok = p.returncode == 0
        res = json.loads(p.stdout.strip().splitlines()[-1]) if ok else {}
        tl.check(ok and res.get("missing_pairs") == 4 and res.get("status") == "partial",
                 f"unreachable host: exit {p.returncode}, {res} ({dt:.1f} s) {p.stderr.strip()[-200:]}")
        agents.stop()
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
