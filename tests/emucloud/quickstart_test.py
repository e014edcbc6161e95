#!/usr/bin/python3
"""emucloud_quickstart: README.md's quick start, run as written on the emulated cloud.

Reads the first ```sh block under README's "## Quick start" heading (a doc test: a changed README
is what runs) and runs each command line of it unchanged, with `sh -c LINE`, on a testbed of 8 VMs
in 2 racks (host 1000, uplink 250 Mbit/s, seed 3, provider order dealt across the racks).

Where a line runs, from the block's own words:
  - in a step whose heading (`# N. ...`) says "On every VM": on every VM, one after the other; a
    line starting `rankmapd` is the agent, a service: it stays running in the background and the
    test waits for each agent's GET /v1/health before the next step;
  - a line whose trailing comment says "on each node": on every VM at once (one job's nodes);
  - any other line: on the first VM of the provider's order.
Every VM works in one shared directory, which holds what the block takes as the user's: `hosts`
(the testbed's `name address` lines, provider order), `my_mpi_program` (mpi_proof), `train.py`
(fw_ddp_train.py, 2 steps) and `train_xgb.py` (fw_xgb_train.py, 2 rounds).

What a VM image and its user would supply, the test supplies:
  - /etc/rankmap/rankmapd.json = configs/rankmapd.json, what the package installs; each VM has its
    own /etc/rankmap (/etc/netns/VM/rankmap, which `ip netns exec` binds there) and its own
    /var/lib/rankmapd (bound in the VM's mount namespace), and an /etc/hosts naming every VM;
  - on PATH: rankmap, rankmapd and `ssh`, a stand-in that runs the command in the named VM
    (emucloud's ssh-agent: the testbed has no sshd);
  - Open MPI's settings for the testbed (OMPI_MCA_*: the interfaces, TCP, no binding, no tree
    spawn; what `emucloud mpirun` passes, tests/emucloud/README.md), root allowed;
  - RANKMAP_RUN_STRICT=1 and no other RANKMAP_* variable.
The mount points /etc/rankmap and /var/lib/rankmapd are made on the machine when missing (nothing
is written to them: each VM binds its own) and removed again.

Checks: every line exits 0; no line says it ran a command unchanged; the probe finds the 2 racks;
the plan groups by rack; mpirun puts MPI_COMM_WORLD rank r on the plan's r-th host and the
program's checks pass; each torchrun node gets its plan position as node rank and the DDP job
finishes; the XGBoost workers are ranked in plan order and training finishes.

  quickstart_test.py --emucloud PATH --readme README.md --config configs/rankmapd.json
                     --rankmap BIN --rankmapd BIN --mpi-program BIN
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import agents_lib
import emucloud_testlib as lib

kHere = os.path.dirname(os.path.abspath(__file__))
kPrefix = "qs"
kUpArgs = ["--vms", "8", "--racks", "2", "--host-mbit", "1000", "--uplink-mbit", "250",
           "--seed", "3"]
kLineTimeoutS = 300
kAgentWaitS = 30
# What `rankmap run` prints when it runs a command as the user gave it (a plan it could not use).
kFallback = re.compile(r"unchanged|launcher's (node|host) order|not added|not used")
kMpiRank = re.compile(r"rank (\d+) of (\d+) on (\S+?) launcher (-?\d+)")
# Files the block names as the user's, and what the test puts there: the MPI program (a link to
# --mpi-program), and the frameworks' jobs as small runs of the framework tests' scripts (two DDP
# steps of a narrower model, two boosting rounds: the quick start is about running, not timing).
kUserFiles = {"my_mpi_program": None,
              "train.py": ("fw_ddp_train.py", ["--steps", "2", "--width", "1024"]),
              "train_xgb.py": ("fw_xgb_train.py", ["--rounds", "2", "--features", "500"])}
# Directories the VMs bind their own copies on (mount points on the machine).
kEtcDir = "/etc/rankmap"
kStateDir = "/var/lib/rankmapd"


class Line:
    """One command line of the block: the step it belongs to and where it runs."""

    def __init__(self, text, step):
        self.text = text
        self.step = step
        comment = re.search(r"\s#\s*(.*)$", text)
        self.comment = comment.group(1) if comment else ""
        self.words = shlex.split(text, comments=True)
        if re.search(r"\bon each node\b", self.comment, re.I):
            self.where = "each node"
        elif re.search(r"\bon every vm\b", step, re.I):
            self.where = "every VM"
        else:
            self.where = "first VM"
        self.service = self.words[:1] == ["rankmapd"]


def quick_start_lines(readme):
    """The command lines of README's quick-start block, each with its step's heading."""
    with open(readme) as f:
        text = f.read()
    m = re.search(r"^## Quick start\n(.*?)^```sh\n(.*?)^```", text, re.M | re.S)
    if not m:
        lib.fail(f"{readme}: no ```sh block under '## Quick start'")
    lines, step = [], ""
    for raw in m.group(2).splitlines():
        s = raw.strip()
        if not s:
            continue
        if s.startswith("#"):
            if re.match(r"#\s*\d+\.", s):
                step = s
            elif step:
                step += " " + s.lstrip("# ")
            continue
        if s.endswith("\\"):
            lib.fail(f"{readme}: quick start line {s!r}: continued lines are not run by this test")
        lines.append(Line(s, step))
    if not lines:
        lib.fail(f"{readme}: the quick-start block has no command line")
    return lines


def parse_args():
    def more(p):
        p.add_argument("--readme", required=True)
        p.add_argument("--config", required=True, help="configs/rankmapd.json")
        p.add_argument("--rankmap", required=True)
        p.add_argument("--rankmapd", required=True)
        p.add_argument("--mpi-program", required=True, help="mpi_proof, the user's MPI program")
    args = lib.parse_args(more)
    args.emucloud = os.path.abspath(args.emucloud)  # the lines run in another directory
    return args


def require_tools():
    lib.require_environment()
    for tool in ("mpirun", "torchrun", "openssl", "awk", "install"):
        if shutil.which(tool) is None:
            lib.skip(f"{tool} not found (scripts/setup-deps installs it)")
    for module in ("torch", "xgboost"):
        p = subprocess.run(["/usr/bin/python3", "-c", f"import {module}"], capture_output=True)
        if p.returncode != 0:
            lib.skip(f"/usr/bin/python3 cannot import {module} (scripts/setup-deps installs it)")


class MachineDirs:
    """Mount points the test makes on the machine when missing, and removes when it ends; and
    each VM's /etc/netns/VM directory."""

    def __init__(self):
        self.made = []

    def mount_point(self, path):
        if not os.path.isdir(path):
            os.makedirs(path)
            self.made.append(path)

    def netns_etc(self, vm):
        path = os.path.join("/etc/netns", vm)
        if not os.path.isdir("/etc/netns"):
            self.mount_point("/etc/netns")  # removed (last) only when the test made it
        os.makedirs(path, exist_ok=True)
        self.made.append(path)
        return path

    def remove(self):
        for path in reversed(self.made):
            if path.startswith("/etc/netns/"):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.rmdir(path)
                except OSError as e:
                    print(f"warning: could not remove {path}: {e}", flush=True)


def user_environment(tb, bindir, tmpdir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKMAP_")}
    subnet = tb.truth["subnet"]
    env.update({
        "PATH": bindir + ":" + env.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "RANKMAP_RUN_STRICT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_btl_tcp_if_include": subnet, "OMPI_MCA_oob_tcp_if_include": subnet,
        "OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "tcp,self", "OMPI_MCA_plm_rsh_no_tree_spawn": "1",
        "OMPI_MCA_mpi_yield_when_idle": "1", "OMPI_MCA_hwloc_base_binding_policy": "none",
        # torchrun keeps a torchelastic_* log folder under TMPDIR: the test's.
        "TMPDIR": tmpdir,
    })
    return env


def vm_argv(tb, vm, text, state):
    """`sh -c text` in `vm`, with the VM's own /var/lib/rankmapd bound in its mount namespace."""
    return tb.exec_argv(vm, "sh", "-c", 'mount --bind "$0" ' + kStateDir + ' && exec sh -c "$1"',
                        state, text)


def wait_agent(tb, vm, env, log, proc):
    deadline = time.monotonic() + kAgentWaitS
    while time.monotonic() < deadline and proc.poll() is None:
        p = subprocess.run(tb.exec_argv(vm, "/usr/bin/python3", "-c", agents_lib.kHttpClient,
                                        "GET", "http://127.0.0.1:7410/v1/health", "", ""),
                           capture_output=True, text=True, timeout=60, env=env)
        if p.returncode == 0 and p.stdout.startswith("200"):
            return
        time.sleep(0.3)
    with open(log) as f:
        tail = f.read()[-2000:]
    why = (f"exited ({proc.returncode})" if proc.poll() is not None
           else f"did not answer GET /v1/health within {kAgentWaitS} s")
    lib.fail(f"{vm}: the agent {why}:\n{tail}")


def run_line(tb, line, vms, work, states, env, logs):
    """Runs one line where it belongs; returns {vm: (exit, output)} (services: not waited)."""
    procs = []
    for vm in vms:
        log = os.path.join(logs, f"{vm}.{len(os.listdir(logs))}.log")
        out = open(log, "wb")
        procs.append((vm, log, subprocess.Popen(vm_argv(tb, vm, line.text, states[vm]), cwd=work,
                                                env=env, stdin=subprocess.DEVNULL, stdout=out,
                                                stderr=subprocess.STDOUT,
                                                start_new_session=True)))
        out.close()
        if line.service:
            wait_agent(tb, vm, env, log, procs[-1][2])
        elif line.where == "every VM":
            try:  # one VM after the other; a timeout is reported below
                procs[-1][2].wait(timeout=kLineTimeoutS)
            except subprocess.TimeoutExpired:
                pass
    if line.service:
        return {vm: (0, "") for vm, _, _ in procs}
    results = {}
    deadline = time.monotonic() + kLineTimeoutS
    for vm, log, proc in procs:
        try:
            rc = proc.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            rc = 124
            for _, _, p in procs:
                try:
                    os.killpg(p.pid, 9)
                except ProcessLookupError:
                    pass
        with open(log, errors="replace") as f:
            results[vm] = (rc, f.read())
    return results


def check_outcomes(tb, work, outputs):
    """What the lines did, from their output and the files they wrote."""
    truth = tb.truth
    rack = {v["name"]: v["rack"] for v in truth["vms"]}
    with open(os.path.join(work, "topology.json")) as f:
        topo = json.load(f)
    with open(os.path.join(work, "plan.json")) as f:
        plan = json.load(f)
    lib.check(sorted(topo["hosts"] if isinstance(topo["hosts"][0], str)
                     else [h["name"] for h in topo["hosts"]]) == sorted(rack),
              "the probe measured every VM of the hosts file")
    levels = plan.get("groups") or []
    groups = levels[0]["groups"] if levels else []
    lib.check(len(groups) == truth["racks"] and
              all(len({rack[h] for h in g}) == 1 for g in groups),
              f"the plan's groups are the hidden racks ({groups})")
    order = plan["order"]
    lib.check(sum(rack[a] != rack[b] for a, b in zip(order, order[1:] + order[:1])) ==
              truth["racks"], "the plan's ring crosses each rack boundary once")

    def output_of(word):
        hits = [o for text, o in outputs if word in text]
        if len(hits) != 1:
            lib.fail(f"expected one quick-start line with {word!r}, found {len(hits)}")
        return hits[0]

    mpi = next(iter(output_of("mpirun").values()))[1]
    lib.check("in plan order" in mpi, "mpirun: rankmap run launched the hosts in plan order")
    ranks = {int(m.group(1)): m.group(3) for m in kMpiRank.finditer(mpi)}
    lib.check(len(ranks) == len(order) and all(ranks[r] == order[r] for r in range(len(order))),
              f"mpirun: MPI_COMM_WORLD rank r runs on the plan's order[r] ({ranks})")
    lib.check("check " in mpi, "mpirun: the program's collectives checked their results")

    torch = output_of("torchrun")
    got = {}
    for vm, (_, text) in torch.items():
        m = re.search(r"this node (\S+) is node rank (\d+) of", text)
        lib.check(m is not None and m.group(1) == vm,
                  f"torchrun on {vm}: rankmap run set its node rank from the plan")
        got[vm] = int(m.group(2))
    lib.check(all(order[r] == vm for vm, r in got.items()),
              f"torchrun: node ranks are the plan's positions ({got})")
    lib.check(any('"summary"' in text for _, text in torch.values()),
              "torchrun: the DDP job finished (rank 0's summary)")

    xgb = next(iter(output_of("--xgboost").values()))[1]
    lib.check("ranked in plan order" in xgb, "xgboost: workers ranked in plan order")
    tasks = dict(re.findall(r"[Tt]ask (rankmap-\d+) got (?:new )?rank (\d+)", xgb))
    lib.check(len(tasks) == len(order) and all(int(t.split("-")[1]) == int(r)
                                               for t, r in tasks.items()),
              f"xgboost: worker at plan position r got rank r ({tasks})")
    lib.check('"summary"' in xgb, "xgboost: training finished (rank 0's summary)")


def main():
    args = parse_args()
    if os.geteuid() != 0:
        lib.skip("needs root (network namespaces)")
    require_tools()
    lines = quick_start_lines(args.readme)
    block = "\n".join(l.text for l in lines)
    for name in kUserFiles:
        if name not in block:
            lib.fail(f"README's quick start no longer names {name}: update kUserFiles")
    print("quick start, as README.md has it:", flush=True)
    for l in lines:
        print(f"  [{l.where}{', service' if l.service else ''}] {l.text}", flush=True)

    work = tempfile.mkdtemp(prefix="quickstart_test.")
    machine = MachineDirs()
    try:
        with lib.Testbed(args.emucloud, kPrefix, kUpArgs) as tb:
            vms = [v["name"] for v in tb.truth["vms"]]
            bindir = os.path.join(work, ".bin")
            os.makedirs(bindir)
            os.symlink(os.path.abspath(args.rankmap), os.path.join(bindir, "rankmap"))
            os.symlink(os.path.abspath(args.rankmapd), os.path.join(bindir, "rankmapd"))
            with open(os.path.join(bindir, "ssh"), "w") as f:
                f.write("#!/bin/sh\n# emucloud_quickstart's ssh: the command runs in the named VM."
                        f"\nexec {shlex.quote(os.path.join(tb.state_dir(), 'ssh-agent'))} "
                        '"$@"\n')
            os.chmod(os.path.join(bindir, "ssh"), 0o755)
            shutil.copy(os.path.join(tb.state_dir(), "hosts"), os.path.join(work, "hosts"))
            os.symlink(os.path.abspath(args.mpi_program), os.path.join(work, "my_mpi_program"))
            for name, job in kUserFiles.items():
                if job:
                    script, argv = job
                    with open(os.path.join(work, name), "w") as f:
                        f.write(f"import runpy, sys\nsys.argv[1:1] = {argv!r}\n"
                                f"runpy.run_path({os.path.join(kHere, script)!r}, "
                                f"run_name='__main__')\n")
            machine.mount_point(kEtcDir)
            machine.mount_point(kStateDir)
            etc_hosts = "127.0.0.1 localhost\n" + "".join(
                f"{v['address']} {v['name']}\n" for v in tb.truth["vms"])
            states = {}
            for vm in vms:
                etc = machine.netns_etc(vm)
                os.makedirs(os.path.join(etc, "rankmap"))
                shutil.copy(args.config, os.path.join(etc, "rankmap", "rankmapd.json"))
                with open(os.path.join(etc, "hosts"), "w") as f:
                    f.write(etc_hosts)
                states[vm] = os.path.join(tb.state_dir(), "quickstart-state", vm)
                os.makedirs(states[vm])
            tmpdir = os.path.join(work, ".tmp")
            os.makedirs(tmpdir)
            env = user_environment(tb, bindir, tmpdir)
            logs = os.path.join(tb.state_dir(), "quickstart-logs")
            os.makedirs(logs)

            outputs = []
            for line in lines:
                where = {"first VM": vms[:1]}.get(line.where, vms)
                t0 = time.monotonic()
                results = run_line(tb, line, where, work, states, env, logs)
                dt = time.monotonic() - t0
                for vm, (rc, text) in results.items():
                    if rc != 0:
                        lib.fail(f"`{line.text}` on {vm}: exit {rc}:\n{text[-3000:]}")
                    bad = [l for l in text.splitlines()
                           if l.startswith("rankmap") and kFallback.search(l)]
                    if bad:
                        lib.fail(f"`{line.text}` on {vm} ran a command unchanged: {bad[0]}")
                print(f"ok: `{line.text}` on {len(results)} VM(s), exit 0, {dt:.1f} s",
                      flush=True)
                first = next(iter(results.values()))[1].strip()
                if first and not line.service:
                    print("   " + "\n   ".join(first.splitlines()[-6:]), flush=True)
                outputs.append((line.text, results))
            check_outcomes(tb, work, outputs)
    finally:
        machine.remove()
        shutil.rmtree(work, ignore_errors=True)
    print("PASS: README's quick start runs as written", flush=True)


if __name__ == "__main__":
    main()
