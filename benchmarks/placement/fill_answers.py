"""``fill``'s answers, hashed, on the first 140 stored tight instances and the 384 x 16 speed
instance: placed compute, ratio to CP-SAT and a hash of the answer per instance, and the worst
ratio. Two checkouts giving the same output give the same answers (a speed-up that must not
change them is checked so):

    PYTHONPATH=$PWD python benchmarks/placement/fill_answers.py > a.json          # in each checkout
    PYTHONPATH=$PWD python benchmarks/placement/fill_answers.py '{"kicks": 0}'    # fill's options as JSON
"""
import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tight_instances import OPTIMA, make_instance, speed_instance  # noqa: E402
from hypersack.placement import assign, placed_compute  # noqa: E402

options = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
out = {}
opt = json.loads(OPTIMA.read_text())
for seed in range(140):
    jobs, cluster = make_instance(seed)
    a = assign(jobs, cluster, "fill", check=True, **options)
    v = placed_compute(jobs, cluster, a)
    out[str(seed)] = {"value": round(v, 6), "ratio": round(v / opt[str(seed)]["objective"], 5),
                      "hash": hashlib.sha1(repr(sorted((str(k), v) for k, v in a.items())).encode()).hexdigest()[:12]}
jobs, cluster = speed_instance("384x16")
a = assign(jobs, cluster, "fill", check=True, **options)
out["384x16"] = {"value": round(placed_compute(jobs, cluster, a), 6),
                 "hash": hashlib.sha1(repr(sorted((str(k), v) for k, v in a.items())).encode()).hexdigest()[:12]}
ratios = [out[str(s)]["ratio"] for s in range(140)]
out["_worst"] = {"ratio": min(ratios), "seed": ratios.index(min(ratios)), "mean": sum(ratios) / len(ratios)}
print(json.dumps(out, indent=0, sort_keys=True))
