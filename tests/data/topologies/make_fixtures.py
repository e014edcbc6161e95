#!/usr/bin/env python3
"""Writes the planner's topology.json fixtures in this folder (deterministic; rerun to regenerate).

Each fixture is a small tree network (hosts in racks behind uplinks) measured the way the probes
would: a pair's single-flow rate is the narrowest link on its path, its latency the sum of the
link latencies, both scaled by independent uniform noise per direction. Rack membership is hidden
behind a seeded shuffle, as on the emucloud testbed; each fixture's truth is in
fixtures_truth.json (rack of every host) so tests can compare.

This is a second, independent implementation of the semantics of reorder/synthetic.cc, on
purpose: the fixtures do not depend on the code they test.

Usage: make_fixtures.py [OUTDIR]   (default: the folder of this script)
"""

import json
import os
import random
import sys


def latency_stats(v):
    return {"min": round(v, 3), "median": round(v * 1.1, 3), "p90": round(v * 1.3, 3),
            "p99": round(v * 1.5, 3)}


def make(name, racks, host_mbps, uplink_mbps, in_us, cross_us, noise=0.05, lat_noise=None,
         missing=0.0, bandwidth=True, latency=True, shared=False, seed=1, host_prefix="h",
         addresses=False, flat_bandwidth=None, flat_latency=None):
    """racks: list of rack sizes. host_mbps: a rate or a per-true-host list. uplink_mbps: a rate
    or a per-rack list."""
    rng = random.Random(seed)
    n = sum(racks)
    rack_of_true = []
    for r, size in enumerate(racks):
        rack_of_true += [r] * size
    perm = list(range(n))
    rng.shuffle(perm)  # true host t is topology host perm[t]
    rack = [0] * n
    rate = [0.0] * n
    rates = host_mbps if isinstance(host_mbps, list) else [host_mbps] * n
    for t in range(n):
        rack[perm[t]] = rack_of_true[t]
        rate[perm[t]] = rates[t]
    up = uplink_mbps if isinstance(uplink_mbps, list) else [uplink_mbps] * len(racks)
    lat_noise = noise if lat_noise is None else lat_noise
    names = [f"{host_prefix}{i}" for i in range(n)]
    hosts = [{"name": names[i], "address": f"10.213.0.{i + 10}" if addresses else ""}
             for i in range(n)]
    bw = [[None] * n for _ in range(n)]
    lat = [[None] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            if missing and rng.random() < missing:
                continue
            same = rack[i] == rack[j]
            flow = min(rate[i], rate[j]) if same else min(rate[i], rate[j], up[rack[i]],
                                                          up[rack[j]])
            if flat_bandwidth is not None:
                flow = flat_bandwidth
            one_way = in_us if same else cross_us
            if flat_latency is not None:
                one_way = flat_latency
            for a, b in ((i, j), (j, i)):
                if bandwidth:
                    bw[a][b] = round(flow * (1 + noise * (2 * rng.random() - 1)), 2)
                if latency:
                    lat[a][b] = latency_stats(one_way * (1 + lat_noise * (2 * rng.random() - 1)))
    doc = {
        "schema_version": 1,
        "hosts": hosts,
        "bandwidth_mbps": bw,
        "latency_us": lat,
        "probe": {"latency_samples": 1000, "bandwidth_max_ms": 1000,
                  "bandwidth_max_bytes": 67108864, "contention": shared},
        "time": "",
        "version": 1,
    }
    if shared:
        doc["shared_links"] = [
            {"hosts": [names[h] for h in range(n) if rack[h] == r], "capacity_mbps": up[r]}
            for r in range(len(racks))]
    truth = {"rack": rack, "host_mbps": rate,
             "uplink_mbps": uplink_mbps}
    return doc, truth


def make_links(name, pods, racks_per_pod, hosts_per_rack, host_mbps, rack_mbps, pod_mbps,
               latencies, measured_per_host=4, seed=1):
    """A sparse probe's topology.json (schema 2): the link model of a pods / racks / hosts tree
    ("links": host links and rack and pod uplinks, {out, in} each, one-way latency per tier), the
    groups, a sample of measured pairs, and no matrices. rack_mbps and pod_mbps are (out, in)."""
    rng = random.Random(seed)
    racks = pods * racks_per_pod
    n = racks * hosts_per_rack
    perm = list(range(n))
    rng.shuffle(perm)  # true host t is topology host perm[t]
    rack = [0] * n
    for t in range(n):
        rack[perm[t]] = t // hosts_per_rack
    names = [f"{name}{i}" for i in range(n)]
    # Groups in order of their lowest member, members in host order.
    def level(group_of):
        order = []
        for h in range(n):
            if group_of[h] not in order:
                order.append(group_of[h])
        return order, [[names[h] for h in range(n) if group_of[h] == g] for g in order]
    rack_order, rack_groups = level(rack)
    pod = [r // racks_per_pod for r in rack]
    pod_order, pod_groups = level(pod)
    measured = []
    for a in range(n):
        for _ in range(measured_per_host):
            b = rng.randrange(n - 1)
            b = b + 1 if b >= a else b
            if [a, b] not in measured:
                measured.append([a, b])
    doc = {
        "schema_version": 2,
        "hosts": [{"name": names[i], "address": ""} for i in range(n)],
        "groups": [{"name": "rack", "confidence": 1.0, "groups": rack_groups},
                   {"name": "pod", "confidence": 1.0, "groups": pod_groups}],
        "links": {
            "hosts": [{"out_mbps": host_mbps, "in_mbps": host_mbps} for _ in range(n)],
            "uplinks": [[{"out_mbps": rack_mbps[0], "in_mbps": rack_mbps[1]} for _ in rack_order],
                        [{"out_mbps": pod_mbps[0], "in_mbps": pod_mbps[1]} for _ in pod_order]],
            "host_latency_us": latencies[0],
            "uplink_latency_us": list(latencies[1:]),
        },
        "measured": measured,
        "probe": {"latency_samples": 100, "bandwidth_max_ms": 1000,
                  "bandwidth_max_bytes": 67108864, "contention": False},
        "time": "",
        "version": 1,
    }
    truth = {"rack": rack, "pod": pod, "host_mbps": [host_mbps] * n,
             "uplink_mbps": min(rack_mbps)}
    return doc, truth


def dump(path, doc):
    with open(path, "w") as f:
        # One matrix row per line keeps diffs readable.
        f.write("{\n")
        keys = list(doc.keys())
        for k, key in enumerate(keys):
            sep = "," if k + 1 < len(keys) else ""
            v = doc[key]
            if key in ("bandwidth_mbps", "latency_us"):
                rows = [json.dumps(r, separators=(",", ":")) for r in v]
                f.write(f' "{key}": [\n  ' + ",\n  ".join(rows) + f"\n ]{sep}\n")
            else:
                f.write(f' "{key}": {json.dumps(v)}{sep}\n')
        f.write("}\n")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    fixtures = {
        # Real clouds: racks differ by latency (a few us vs tens of us); bandwidth does not.
        "latency_only": make("latency_only", [4, 4, 4], 10000, 10000, 4, 40, noise=0.05,
                             lat_noise=0.15, flat_bandwidth=9400, seed=11),
        # Our testbed: in-rack ~1000 Mbit/s, cross-rack ~250, latency flat (no netem).
        "bandwidth_only": make("bandwidth_only", [4, 4], 1000, 250, 60, 60, noise=0.08,
                               lat_noise=0.2, seed=12),
        # Host 250 / uplink 500: every pair measures 250; only the contention probe tells.
        "shared_links_only": make("shared_links_only", [4, 4], 250, 500, 60, 60, noise=0.05,
                                  lat_noise=0.2, shared=True, seed=13),
        "noisy": make("noisy", [4, 4, 4, 4], 1000, 200, 8, 30, noise=0.2, lat_noise=0.25,
                      seed=14),
        "missing_pairs": make("missing_pairs", [4, 4, 4, 4], 1000, 250, 8, 30, noise=0.08,
                              missing=0.2, seed=15),
        # Heterogeneous host rates: four slow hosts (200) among fast ones (1000), racks of 6.
        "heterogeneous": make("heterogeneous", [6, 6], [1000] * 4 + [200] * 2 + [1000] * 4 +
                              [200] * 2, 600, 6, 25, noise=0.05, seed=16),
        # Rate classes, not pods: 3 racks of 4/3/3 behind uplinks of 500, 125 and 250 Mbit/s,
        # latency flat (the emulated cloud). Racks 0 and 2 measure 250 between them, 125 to rack
        # 1: two "pods" to a clustering, yet each rate is the narrower of the racks' own uplinks.
        "rate_classes": make("rate_classes", [4, 3, 3], 1000, [500, 125, 250], 60, 60,
                             noise=0.08, lat_noise=0.2, seed=22),
        # The emucloud calibration setting: 8 VMs, 2 racks, host 1000, uplink 250.
        "testbed_8vm_2rack": make("testbed", [4, 4], 1000, 250, 55, 58, noise=0.06,
                                  lat_noise=0.1, seed=3, host_prefix="vm", addresses=True),
        # Bad input: too few pairs measured (falls back to identity order with a warning).
        "sparse": make("sparse", [4, 4], 1000, 250, 10, 40, missing=0.7, seed=18),
        # Schema 2, a sparse probe: 2 pods x 3 racks x 4 hosts as a link model, no matrices.
        # Rack uplinks are oversubscribed 4:1 and slower inbound; the pods' 2:1.
        "links_sparse": make_links("l", 2, 3, 4, 1000, (1000, 800), (1500, 1500), (5, 10, 20),
                                   seed=21),
    }
    truth = {}
    for name, (doc, t) in fixtures.items():
        dump(os.path.join(out, name + ".json"), doc)
        truth[name] = t
    # A single host.
    dump(os.path.join(out, "single_host.json"), {
        "schema_version": 1, "hosts": [{"name": "solo", "address": ""}],
        "bandwidth_mbps": [[None]], "latency_us": [[None]], "version": 1})
    # Bad input: many pairs whose two directions disagree by 10x.
    doc, _ = make("asym", [4, 4], 1000, 250, 10, 40, seed=19)
    for i in range(8):
        j = (i + 3) % 8
        doc["bandwidth_mbps"][i][j] = doc["bandwidth_mbps"][j][i] * 10
    dump(os.path.join(out, "bad_asymmetric.json"), doc)
    # Bad input: a negative bandwidth (rejected by the topology parser, naming the field).
    doc, _ = make("negative", [2, 2], 1000, 250, 10, 40, seed=20)
    doc["bandwidth_mbps"][1][2] = -5
    dump(os.path.join(out, "bad_negative.json"), doc)
    with open(os.path.join(out, "fixtures_truth.json"), "w") as f:
        json.dump(truth, f, indent=1, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out, "testbed_8vm_2rack.hosts"), "w") as f:
        f.write("# a subset of the testbed, in launcher order: name [address]\n")
        for i in (0, 2, 3, 5, 6, 7):
            f.write(f"vm{i} 10.213.0.{i + 10}\n")


if __name__ == "__main__":
    main()
