"""rankmap's recorder of a PyTorch job's profile (common/job_profile.h; docs/formats.md,
"profile.json"). Python loads it as `sitecustomize` because `rankmap run --record-profile FILE --
torchrun ...` puts this folder first on PYTHONPATH and sets RANKMAP_PROFILE_RECORDS.

In a torchrun worker (TORCHELASTIC_RUN_ID and RANK set) it wraps torch.distributed's functions as
the module is imported:
  - new_group: the groups the job forms. Every rank makes every group in the same order
    (new_group's contract), so every rank numbers them into sets alike: consecutive groups that
    are disjoint and equal in size are one set, as one MPI_Comm_split's groups are;
  - the collectives (all_reduce, all_reduce_coalesced, broadcast, all_gather,
    all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor, all_to_all,
    all_to_all_single) and the sends (send, isend; the receiver counts nothing): calls and bytes
    per group as the MPI shim counts them, and on the default group the messages by destination.
A call that torch makes inside another wrapped call is not counted again.

At exit every rank puts its record into the job's c10d store (the one init_process_group used);
rank 0 waits for every rank's (RANKMAP_TIMEOUT, which rankmap run passes in milliseconds) and
writes them to RANKMAP_PROFILE_RECORDS, which rankmap run merges into FILE when the job has ended
(JobProfile::merge). Whatever goes wrong costs the profile, never the job: one line on stderr,
prefixed "rankmap profile:". Anywhere else (the torchrun agent, other programs) it records
nothing. Either way it then runs the next `sitecustomize` on the path, which it shadows.
"""

import atexit
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import json
import os
import sys
import threading

_HERE = os.path.dirname(os.path.abspath(__file__))


def _say(msg):
    try:
        sys.stderr.write(f"rankmap profile: {msg}\n")
        sys.stderr.flush()
    except Exception:
        pass


class _Recorder:
    """What this rank saw: the world's traffic and that of each group it is in."""

    def __init__(self):
        self.lock = threading.Lock()
        self.local = threading.local()
        self.store = None
        self.rank = -1
        self.world = 0
        self.world_entry = None
        self.groups = {}  # process group -> its entry (this rank's groups only)
        self.call = 0  # the current set's number
        self.set_size = 0
        self.set_ranks = set()
        self.broken = ""

    def nbytes(self, t):
        return t.numel() * t.element_size()

    def count(self, group, collective, nbytes, peer=None):
        with self.lock:
            e = self.world_entry if self.is_world(group) else self.groups.get(group)
            if e is None:
                return  # a group not made by new_group: not followed
            c = e["t"].setdefault(collective, [0, 0])
            c[0] += 1
            c[1] += nbytes
            if peer is not None and e is self.world_entry:
                p = e["p"].setdefault(int(peer), [0, 0])
                p[0] += 1
                p[1] += nbytes

    def is_world(self, group):
        import torch.distributed.distributed_c10d as c10d
        return group is None or group is c10d.GroupMember.WORLD

    def group_size(self, group):
        e = self.world_entry if self.is_world(group) else self.groups.get(group)
        return len(e["g"]) if e else 1


_rec = _Recorder()


def _bound(sig, args, kwargs):
    b = sig.bind_partial(*args, **kwargs)
    return b.arguments


# Wrapped collectives: name -> (collective, bytes(arguments, group size)).
def _list_bytes(ts):
    return sum(_rec.nbytes(t) for t in ts)


_COLLECTIVES = {
    "all_reduce": ("allreduce", lambda a, n: _rec.nbytes(a["tensor"])),
    "all_reduce_coalesced": ("allreduce", lambda a, n: _list_bytes(a["tensors"])),
    "broadcast": ("broadcast", lambda a, n: _rec.nbytes(a["tensor"])),
    "all_gather": ("allgather", lambda a, n: _rec.nbytes(a["tensor"]) * n),
    "all_gather_into_tensor": ("allgather", lambda a, n: _rec.nbytes(a["output_tensor"])),
    "_all_gather_base": ("allgather", lambda a, n: _rec.nbytes(a["output_tensor"])),
    "reduce_scatter": ("reducescatter", lambda a, n: _rec.nbytes(a["output"]) * n),
    "reduce_scatter_tensor": ("reducescatter", lambda a, n: _rec.nbytes(a["input"])),
    "_reduce_scatter_base": ("reducescatter", lambda a, n: _rec.nbytes(a["input"])),
    "all_to_all": ("alltoall", lambda a, n: _list_bytes(a["input_tensor_list"])),
    "all_to_all_single": ("alltoall", lambda a, n: _rec.nbytes(a["input"])),
}
_SENDS = ("send", "isend")


def _counting(name, orig, how):
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        depth = getattr(_rec.local, "depth", 0)
        if depth == 0 and not _rec.broken:
            try:
                a = _bound(sig, args, kwargs)
                group = a.get("group")
                how(a, group)
            except Exception as e:  # the job's call goes on; the profile is lost
                _rec.broken = f"{name}: {e}"
        _rec.local.depth = depth + 1
        try:
            return orig(*args, **kwargs)
        finally:
            _rec.local.depth = depth

    return wrapper


def _wrap_collective(name, orig):
    collective, size = _COLLECTIVES[name]
    return _counting(name, orig, lambda a, g: _rec.count(g, collective, size(a, _rec.group_size(g))))


def _wrap_send(name, orig):
    # Newer torch may name the peer by its rank in the group instead (dst None): no peer then.
    return _counting(name, orig,
                     lambda a, g: _rec.count(g, "sendrecv", _rec.nbytes(a["tensor"]), a.get("dst")))


def _wrap_new_group(orig):
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def new_group(*args, **kwargs):
        g = orig(*args, **kwargs)
        try:
            ranks = _bound(sig, args, kwargs).get("ranks")
            ranks = sorted(set(int(r) for r in ranks)) if ranks else list(range(_rec.world))
            with _rec.lock:
                if (_rec.call == 0 or len(ranks) != _rec.set_size or
                        _rec.set_ranks.intersection(ranks)):
                    _rec.call += 1
                    _rec.set_size = len(ranks)
                    _rec.set_ranks = set()
                _rec.set_ranks.update(ranks)
                if _rec.rank in ranks:
                    _rec.groups[g] = {"m": "new_group", "c": _rec.call, "g": ranks, "t": {}}
        except Exception as e:
            _rec.broken = f"new_group: {e}"
        return g

    return new_group


def _wrap_init(orig, c10d):
    @functools.wraps(orig)
    def init_process_group(*args, **kwargs):
        r = orig(*args, **kwargs)
        try:
            with _rec.lock:
                _rec.store = c10d._get_default_store()
                _rec.rank = c10d.get_rank()
                _rec.world = c10d.get_world_size()
                _rec.world_entry = {"m": "world", "c": 0, "g": list(range(_rec.world)), "t": {},
                                    "p": {}}
            atexit.register(_finish)
        except Exception as e:
            _say(f"not recorded: the job's store could not be read ({e})")
        return r

    return init_process_group


def _patch(c10d):
    try:
        for name in _COLLECTIVES:
            if hasattr(c10d, name):
                setattr(c10d, name, _wrap_collective(name, getattr(c10d, name)))
        for name in _SENDS:
            setattr(c10d, name, _wrap_send(name, getattr(c10d, name)))
        c10d.new_group = _wrap_new_group(c10d.new_group)
        c10d.init_process_group = _wrap_init(c10d.init_process_group, c10d)
    except Exception as e:
        _say(f"not recorded: torch.distributed could not be wrapped ({e})")


def _timeout_s():
    v = os.environ.get("RANKMAP_TIMEOUT", "")
    if v.endswith("ms") and v[:-2].isdigit():
        return max(int(v[:-2]) / 1000.0, 1.0)
    return 300.0


def _finish():
    import datetime
    rec = _rec
    if rec.store is None:
        return
    prefix = "rankmap/profile/{}/{}/".format(os.environ.get("TORCHELASTIC_RUN_ID", ""),
                                             os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    try:
        with rec.lock:
            if rec.broken:
                mine = json.dumps({"broken": rec.broken})
            else:
                w = dict(rec.world_entry)
                w["p"] = [[to, c[0], c[1]] for to, c in sorted(w["p"].items())]
                mine = json.dumps([w] + list(rec.groups.values()))
        rec.store.set(prefix + str(rec.rank), mine)
        if rec.rank != 0:
            return
        keys = [prefix + str(r) for r in range(rec.world)]
        rec.store.wait(keys, datetime.timedelta(seconds=_timeout_s()))
        records = [rec.store.get(k).decode() for k in keys]
        for r, text in enumerate(records):
            if text.startswith('{"broken"'):
                _say(f"not recorded: rank {r} could not record ({json.loads(text)['broken']})")
                return
        path = os.environ["RANKMAP_PROFILE_RECORDS"]
        doc = {"schema": "rankmap.profile-records", "version": 1,
               "program": os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python",
               "records": records}
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)  # a file of rankmap run's own folder: never a device
    except Exception as e:
        _say(f"not recorded: {type(e).__name__}: {e}")


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps torch.distributed.distributed_c10d right after it runs, before torch.distributed
    re-exports its names."""

    def find_spec(self, name, path, target=None):
        if name != "torch.distributed.distributed_c10d":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


def _chain():
    """Runs the sitecustomize this one shadows (Debian's, the user's)."""
    try:
        path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
        if spec is not None and spec.loader is not None:
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
    except Exception as e:
        _say(f"the next sitecustomize failed: {type(e).__name__}: {e}")


if (os.environ.get("RANKMAP_PROFILE_RECORDS") and os.environ.get("TORCHELASTIC_RUN_ID") is not None
        and os.environ.get("RANK") is not None):
    sys.meta_path.insert(0, _Finder())
_chain()
