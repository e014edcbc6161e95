#!/usr/bin/python3
"""A declared placement against a probed testbed: `rankmap show` flags exactly its mistakes.

12 VMs in 3 hidden racks are probed by rankmapd; the declared placement is written from the
testbed's truth.json as AWS DescribeInstanceTopology output (instance IDs mapped to the VMs by
host_names) with two deliberate mistakes at the lowest layer: the first two racks declared behind
one switch, and the third rack declared behind two. `rankmap plan --prior` and `rankmap show`
must list exactly these two disagreements (the hosts, the switches, the measured racks, the
rates: across racks between the first, inside a rack between the second), and a correct
declaration (node labels as EKS writes them) must agree. The plan's racks stay the measured
ones (asserted equal to truth.json).
"""

import json
import os
import subprocess
import sys
import tempfile

import agents_lib as al
import emucloud_testlib as tl


def extra(p):
    tl.add_testbed_args(p, vms=12, racks=3, seed=5)
    p.add_argument("--prefix", default="prior")


def aws_prior(racks, mistakes):
    """DescribeInstanceTopology output for `racks` (lists of VM names), the lowest layer per rack
    (with `mistakes`: racks 0 and 1 on one switch, rack 2 split in two)."""
    instances, names = [], {}
    for r, vms in enumerate(racks):
        for k, vm in enumerate(vms):
            leaf = f"nn-leaf-{r}"
            if mistakes and r == 1:
                leaf = "nn-leaf-0"
            if mistakes and r == 2:
                leaf = "nn-leaf-2a" if k < len(vms) // 2 else "nn-leaf-2b"
            iid = f"i-0{len(names):04x}c0ffee00"
            names[iid] = vm
            instances.append({"InstanceId": iid, "InstanceType": "p5.48xlarge",
                              "NetworkNodes": ["nn-top", "nn-spine", leaf],
                              "AvailabilityZone": "us-east-1a", "ZoneId": "use1-az6"})
    return {"Instances": instances, "host_names": names}


def k8s_prior(racks):
    items = []
    for r, vms in enumerate(racks):
        for vm in vms:
            labels = {"topology.k8s.aws/network-node-layer-1": "nn-top",
                      "topology.k8s.aws/network-node-layer-2": "nn-spine",
                      "topology.k8s.aws/network-node-layer-3": f"nn-leaf-{r}"}
            items.append({"metadata": {"name": vm, "labels": labels},
                          "status": {"addresses": []}})
    return {"apiVersion": "v1", "kind": "List", "items": items}


def run(words):
    p = subprocess.run(words, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        tl.fail(f"{' '.join(words[1:3])}: exit {p.returncode}: {p.stderr.strip()[-1500:]}")
    return p.stdout


def main():
    args = al.parse_args(extra)
    tl.require_environment()
    with tl.Testbed(args.emucloud, args.prefix, tl.up_args(args)) as tb, \
            tempfile.TemporaryDirectory() as work:
        tpath = os.path.join(work, "topology.json")
        al.probe_topology(tb, args.rankmapd, args.rankmap, tpath)
        # Racks in the order of their lowest VM index (as the planner numbers its groups).
        order = {v["name"]: i for i, v in enumerate(tb.truth["vms"])}
        racks = sorted((sorted(r, key=order.get) for r in al.racks_of(tb.truth)),
                       key=lambda r: order[r[0]])

        wrong = os.path.join(work, "wrong.json")
        with open(wrong, "w") as f:
            json.dump(aws_prior(racks, mistakes=True), f, indent=1)
        ppath = os.path.join(work, "plan.json")
        print(run([args.rankmap, "plan", "--topology", tpath, "--prior", wrong, "--out", ppath]),
              flush=True)
        with open(ppath) as f:
            plan = json.load(f)
        measured = [sorted(g, key=order.get) for g in plan["groups"][0]["groups"]]
        tl.check(sorted(map(sorted, measured)) == sorted(map(sorted, racks)),
                 f"the plan's racks {measured} are the testbed's {racks} (measured groups win)")
        prior = plan["prior"]
        tl.check(len(prior["hosts"]) == args.vms, f"the prior covers all {args.vms} VMs")
        dis = prior["disagreements"]
        tl.check(len(dis) == 2, f"exactly two disagreements: {json.dumps(dis)}")
        together, apart = dis
        half = len(racks[2]) // 2
        tl.check(together["kind"] == "declared_together" and together["declared"] == ["nn-leaf-0"]
                 and sorted(map(sorted, together["hosts"])) == sorted(map(sorted, racks[:2])),
                 f"racks 0 and 1 declared on one switch are flagged: {json.dumps(together)}")
        tl.check(apart["kind"] == "declared_apart"
                 and apart["declared"] == ["nn-leaf-2a", "nn-leaf-2b"]
                 and apart["hosts"] == [racks[2][:half], racks[2][half:]],
                 f"rack 2 declared on two switches is flagged: {json.dumps(apart)}")
        same = prior["same_group_mbps"]
        tl.check(together["between_mbps"] < 0.5 * same < apart["between_mbps"],
                 f"measured: {together['between_mbps']} Mbit/s across the first (cross-rack), "
                 f"{apart['between_mbps']} inside the second (in-rack {same})")

        shown = run([args.rankmap, "show", ppath])
        lines = [l for l in shown.splitlines() if l.startswith("  declared ")]
        print("\n".join(l for l in shown.splitlines() if "prior" in l or "disagree" in l)
              + "\n" + "\n".join(lines), flush=True)
        tl.check(len(lines) == 2 and lines[0].startswith(
            "  declared together, measured apart: switch nn-leaf-0 holds hosts of rack ")
                 and lines[1].startswith("  declared apart, measured together: rack ")
                 and "nn-leaf-2a" in lines[1] and "nn-leaf-2b" in lines[1],
                 f"rankmap show lists the two, one line each:\n{shown}")
        tl.check(all(vm in lines[0] for vm in racks[0] + racks[1])
                 and all(vm in lines[1] for vm in racks[2]), "each line names its hosts")

        right = os.path.join(work, "right.json")
        with open(right, "w") as f:
            json.dump(k8s_prior(racks), f, indent=1)
        shown = run([args.rankmap, "show", tpath, "--prior", right])
        tl.check("agrees with the measured racks" in shown
                 and not any(l.startswith("  declared ") for l in shown.splitlines()),
                 f"a correct declaration agrees:\n{shown}")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
