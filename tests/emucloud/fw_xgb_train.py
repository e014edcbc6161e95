"""A distributed XGBoost training job (tree_method="hist") for the frameworks proof on the
testbed. Each worker reads DMLC_TRACKER_URI, DMLC_TRACKER_PORT and DMLC_TASK_ID from its
environment (as dmlc-submit and `rankmap run --xgboost` hand them out; xgboost 1.7 and 2.1+) and
prints, from rank 0,
one JSON line {"summary": {...}} with the training time, the RMSE curve, the model's SHA-256 and
the time of one allreduce of a histogram-sized buffer (the network part alone).

  fw_xgb_train.py [--rows R] [--features F] [--max-bin B] [--rounds N] [--depth D]

Worker r's data comes from a generator seeded with r, so the job is the same whatever host
each rank lands on. Histograms have F x B bins of (grad, hess) doubles per tree node, allreduced
once per node batch; above 32768 elements (F x B here) Rabit runs them as a ring over ranks
r -> r+1, which is why the rank order matters. Rabit sums in rank order, so the model is
bit-identical across host orders.
"""

import argparse
import hashlib
import json
import os
import time

import numpy as np
import xgboost as xgb


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--features", type=int, default=1000)
    p.add_argument("--max-bin", type=int, default=64)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--depth", type=int, default=4)
    a = p.parse_args()
    args = {k: os.environ[k] for k in ("DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID")
            if k in os.environ}
    if "DMLC_TRACKER_PORT" in args:  # xgboost 2.1+ wants an integer; 1.7 takes either
        args["DMLC_TRACKER_PORT"] = int(args["DMLC_TRACKER_PORT"])
    with xgb.collective.CommunicatorContext(**args):
        rank, world = xgb.collective.get_rank(), xgb.collective.get_world_size()
        rng = np.random.default_rng(100 + rank)
        X = rng.standard_normal((a.rows, a.features)).astype(np.float32)
        y = X[:, :16].sum(axis=1) + 0.1 * rng.standard_normal(a.rows)
        dtrain = xgb.DMatrix(X, label=y)
        params = {"tree_method": "hist", "max_bin": a.max_bin, "max_depth": a.depth,
                  "eta": 0.3, "nthread": 1, "objective": "reg:squarederror", "seed": 0}
        xgb.collective.allreduce(np.zeros(1), xgb.collective.Op.SUM)  # a barrier
        t0 = time.perf_counter()
        evals = {}
        bst = xgb.train(params, dtrain, num_boost_round=a.rounds, evals=[(dtrain, "train")],
                        evals_result=evals, verbose_eval=False)
        xgb.collective.allreduce(np.zeros(1), xgb.collective.Op.SUM)
        dt = time.perf_counter() - t0
        # The network part alone: allreduce of one histogram's worth of (grad, hess) doubles,
        # the message the ring carries at every tree level.
        hist = np.ones(a.features * a.max_bin * 2)
        ar = []
        for _ in range(3):
            xgb.collective.allreduce(np.zeros(1), xgb.collective.Op.SUM)
            t1 = time.perf_counter()
            xgb.collective.allreduce(hist, xgb.collective.Op.SUM)
            ar.append(time.perf_counter() - t1)
        if rank == 0:
            model = bst.save_raw("json")
            print(json.dumps({"summary": {
                "xgboost": xgb.__version__, "world": world, "train_s": dt, "rmse": evals["train"]["rmse"],
                "model_sha256": hashlib.sha256(model).hexdigest(),
                "hist_elements": a.features * a.max_bin,
                "hist_allreduce_s": sorted(ar)[1],
                "task_id": os.environ.get("DMLC_TASK_ID", "")}}), flush=True)


if __name__ == "__main__":
    main()
