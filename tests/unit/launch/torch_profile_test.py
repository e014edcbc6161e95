#!/usr/bin/python3
"""`rankmap run --record-profile` with a real PyTorch job: torchrun --standalone, 4 Gloo workers on
loopback, tests/emucloud/mesh_train.py at dp=2 x pp=2 (data-parallel groups from new_group, the
pipeline's activations sent on the world). Checks:
  - the job runs as it does without the hook: exit 0, the same loss at every step (bit for bit),
    nothing from the hook on stdout or stderr but rankmap run's own lines;
  - the profile: program mesh_train.py, 4 ranks, the new_group set {0,2} {1,3} with one allreduce
    per step of the gradients' bytes, the point-to-point set {0,1} {2,3} with a message each way
    per step of the activations' bytes;
  - `rankmap plan --profile` orders 4 hosts of two racks (given alternating) as `rankmap plan
    --mesh dp=2,pp=2 --traffic` with the same bytes does.

Usage: torch_profile_test.py RANKMAP MESH_TRAIN TOPOLOGY
Exits 77 (skipped, with the reason) where /usr/bin/python3 has no torch.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

kPython = "/usr/bin/python3"
kTimeoutS = 240
kSteps = 2
kVocab, kHidden, kTokens = 512, 32, 16


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def check(cond, msg, detail=""):
    """`detail` is printed only when the check fails."""
    if not cond:
        fail(f"{msg} {detail}")
    print(f"ok: {msg}", flush=True)


def losses(out):
    """Rank 0's loss per step (torchrun's --tee prefixes each line with the worker's name)."""
    got = {}
    for line in out.splitlines():
        m = re.search(r'(\{"step".*\})\s*$', line)
        if m:
            j = json.loads(m.group(1))
            got[j["step"]] = j["loss"]
    return got


def main():
    rankmap, train, topology = sys.argv[1:4]
    probe = subprocess.run([kPython, "-c", "import torch.distributed.run"], capture_output=True,
                           text=True, timeout=120)
    if probe.returncode != 0:
        print(f"skipped: {kPython} has no torch.distributed.run ({probe.stderr.strip()[-200:]})")
        sys.exit(77)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKMAP_")}
    env.update(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory(prefix="rankmap-torch-profile-") as tmp:
        # torch 1.13 on Python 3.11 needs --redirects and --tee other than 0 (launch/torchrun.h).
        job = [kPython, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
               "--nproc_per_node", "4", "--redirects", "1", "--tee", "1", "--log_dir",
               os.path.join(tmp, "logs"), train, "--dp", "2", "--pp", "2", "--steps",
               str(kSteps), "--vocab", str(kVocab), "--hidden", str(kHidden), "--tokens",
               str(kTokens)]
        plain = subprocess.run(job, capture_output=True, text=True, env=env, timeout=kTimeoutS,
                               cwd=tmp)
        check(plain.returncode == 0, "the plain job ends",
              f"(exit {plain.returncode}: {plain.stderr[-1500:]})")
        profile = os.path.join(tmp, "profile.json")
        job[job.index("--log_dir") + 1] = os.path.join(tmp, "logs2")
        rec = subprocess.run([rankmap, "run", "--record-profile", profile, "--"] + job,
                             capture_output=True, text=True, env=env, timeout=kTimeoutS, cwd=tmp)
        check(rec.returncode == 0, "the recorded job ends",
              f"(exit {rec.returncode}: {rec.stderr[-2000:]})")
        check(losses(plain.stdout) and losses(rec.stdout) == losses(plain.stdout),
              f"the same loss at every step ({losses(rec.stdout)})", f"plain: {losses(plain.stdout)}")
        check("rankmap" not in rec.stdout and "rankmap profile:" not in rec.stderr,
              "nothing from the hook", f"({rec.stdout[-500:]} {rec.stderr[-1000:]})")
        check(f"rankmap run: job profile of mesh_train.py (4 ranks, 2 group set(s)) written to "
              f"{profile}" in rec.stderr, "rankmap run says where the profile is",
              f"({rec.stderr[-1000:]})")
        check(not [f for f in os.listdir(tmp) if f.startswith("rankmap-run-")],
              "rankmap run removed its files")

        p = json.load(open(profile))
        check(p["program"] == "mesh_train.py" and p["world_size"] == 4,
              f"program and world size ({p['program']}, {p['world_size']})")
        sets = {s["made_by"]: s for s in p["sets"]}
        check(sorted(sets) == ["new_group", "point-to-point", "world"],
              f"the world, the new_group set and the point-to-point set ({sorted(sets)})")
        steps = kSteps + 1  # and the warm-up step
        # Stage 0 holds the table, the last stage the table and the head (hidden + 1 floats).
        dp_bytes = (2 * kVocab * kHidden + kHidden + 1) * 4 / 2
        dp = sets["new_group"]
        check(dp["groups"] == [[0, 2], [1, 3]] and dp["traffic"] == [
            {"collective": "allreduce", "calls": steps, "bytes": round(steps * dp_bytes)}],
              f"data-parallel groups and their gradients ({dp})")
        pp = sets["point-to-point"]
        act = kTokens * kHidden * 4
        check(pp["groups"] == [[0, 1], [2, 3]] and pp["traffic"] == [
            {"collective": "sendrecv", "calls": 2 * steps, "bytes": 2 * steps * act}],
              f"pipeline stage pairs and their activations ({pp})")
        check(all(t["collective"] != "sendrecv" for t in sets["world"]["traffic"]),
              f"the world keeps no messages ({sets['world']})")

        hosts = os.path.join(tmp, "hosts")
        with open(hosts, "w") as f:
            f.write("vm0\nvm4\nvm1\nvm5\n")
        orders = []
        for how in (["--profile", profile],
                    ["--mesh", "dp=2,pp=2", "--traffic",
                     f"dp=allreduce:{round(dp_bytes)},pp=sendrecv:{act}"]):
            out = os.path.join(tmp, "plan.json")
            r = subprocess.run([rankmap, "plan", "--topology", topology, "--hosts", hosts,
                                "--out", out] + how, capture_output=True, text=True,
                               env=env, timeout=60)
            check(r.returncode == 0, f"rankmap plan {' '.join(how[:1])}", r.stderr[-1000:])
            orders.append(json.load(open(out))["order"])
        check(orders[0] == orders[1], f"the profile's plan orders the hosts as --mesh does "
              f"({orders[0]} vs {orders[1]})")
    print("PASS")


if __name__ == "__main__":
    main()
