"""Mutants of placement's shared helpers: each must fail the placement tests.

    python benchmarks/placement/placement_mutants.py            # all mutants (minutes each on 2 busy CPUs)
    python benchmarks/placement/placement_mutants.py k_cores    # one by name

Each mutant is one textual edit, applied to a copy of ``hypersack/`` and ``tests/`` in a
temporary folder; the placement tests run there; KILLED = they failed (good), SURVIVED = a test
is missing. Prints one line per mutant and exits 1 if any survived.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
P = "hypersack/placement/"
MUTANTS = {
    "one_node_tie": (P + "load.py", "score > best_score + EPS", "score >= best_score - EPS"),
    "k_cores": (P + "load.py", "cores[node[i]] = left - q", "cores[node[i]] = left"),
    "by_runtime": (P + "load.py", "return sorted(jobs, key=key, reverse=True)", "return sorted(jobs, key=key)"),
    "demands": (P + "load.py", "out.append({a: (per_arch[a].compute, per_arch[a].memory_gb) if a in per_arch else own",
                "out.append({a: own"),
    "fits_mem": (P + "load.py", "return (self.free_c[i] + EPS >= c and self.free_m[i] + EPS >= m",
                 "return (self.free_c[i] + EPS >= c"),
    "eq4": (P + "check.py", "        if added > left + EPS:", "        if added > left + 1e9:"),
    "tree_first": (P + "fit_tree.py", "            stack += (2 * k + 1, 2 * k)\n        return None",
                   "            stack += (2 * k, 2 * k + 1)\n        return None"),
    "hay_best": (P + "hay.py", "if best is None or free_c[i] > free_c[best]:", "if best is None or free_c[i] < free_c[best]:"),
    "hay_active_first": (P + "hay.py", "_best(live, active) if active else _best(live, idle)",
                         "_best(live, idle) if idle else _best(live, active)"),
    "live_take_q": (P + "live.py", "self._write(journal, load.free_q, n, load.free_q[n] - q)",
                    "self._write(journal, load.free_q, n, load.free_q[n])"),
    "live_take_q_direct": (P + "live.py", "free_q[load.node[i]] -= q", "free_q[load.node[i]] -= 0"),
    "evict_memory": (P + "fill_kernels.py", "if scratch[s, 1] + EPS >= need_m and scratch[s, 2] + EPS >= need_q:",
                     "if scratch[s, 2] + EPS >= need_q:"),
    "evict_cores": (P + "fill_kernels.py", "if scratch[s, 1] + EPS >= need_m and scratch[s, 2] + EPS >= need_q:",
                    "if scratch[s, 1] + EPS >= need_m:"),
    "price_greedy_cores": (P + "prices.py", "if free_q[node_of[g]] + EPS < q or top_c[g]", "if top_c[g]"),
    "price_subgradient_sign": (P + "prices.py", "step = factor * (bound - target) / norm",
                               "step = -factor * (bound - target) / norm"),
    "lagrange_wide_cores": (P + "lagrange.py",
                            "if top_c[g] + EPS < cj or top_m[g] + EPS < mj or free_q[node_of[g]] + EPS < qp:",
                            "if top_c[g] + EPS < cj or top_m[g] + EPS < mj:"),
    "lagrange_wide_one_gpu": (P + "lagrange.py",
                              "if free_c[i] + EPS >= cj and free_m[i] + EPS >= mj and free_c[i] - cj < slack - EPS:",
                              "if free_c[i] + EPS >= cj and free_c[i] - cj < slack - EPS:"),
    "lagrange_group_cores": (P + "lagrange.py", "if free_q[node_of[g]] + EPS < qp or top_c[g] + EPS < c",
                             "if top_c[g] + EPS < c"),
    "lagrange_tie_sign": (P + "lagrange.py", "prefs = np.argsort(-(r - TIE * _share(",
                          "prefs = np.argsort(-(r + TIE * _share("),
    "lagrange_order": (P + "lagrange.py", "order = np.lexsort((-cg.max(axis=1), -best))                 # stable",
                       "order = np.lexsort((-cg.max(axis=1), best))                 # stable"),
    "lagrange_step_sign": (P + "lagrange.py", "step = factor * (bound - TARGET * min(best_l, ceiling)) / norm",
                           "step = -factor * (bound - TARGET * min(best_l, ceiling)) / norm"),
    "fill_enough": (P + "fill_kernels.py", "if fixed_value + best_value >= enough * ceiling - EPS:",
                    "if fixed_value + best_value >= enough * 0 - EPS:"),
    "fk_wf_ties": (P + "fill_kernels.py", "if best < 0 or fc[i] > fc[best]:", "if best < 0 or fc[i] >= fc[best]:"),
    "fk_wf_cores": (P + "fill_kernels.py",
                    "if fc[i] + EPS >= jc[p, a] and fm[i] + EPS >= jm[p, a] and fq[gnode[i]] + EPS >= jq[p]:",
                    "if fc[i] + EPS >= jc[p, a] and fm[i] + EPS >= jm[p, a]:"),
    "fk_swap_memory": (P + "fill_kernels.py",
                       "if jm[u, a] <= m_p + room_m + EPS and jq[u] <= q_p + room_q + EPS:",
                       "if jq[u] <= q_p + room_q + EPS:"),
    "fk_swap_scan": (P + "fill_kernels.py", "while k >= 0 and seen < SCAN:", "while k >= 0 and seen < 2:"),
    "fk_refill_cores": (P + "fill_kernels.py",
                        "if c_u <= room_c + EPS and m_u <= room_m + EPS and q_u <= room_q + EPS:",
                        "if c_u <= room_c + EPS and m_u <= room_m + EPS:"),
    "fk_kick_undo": (P + "fill_kernels.py", "        fc[i], fm[i], fq[gnode[i]] = s_c[t], s_m[t], s_q[t]\n",
                     "        fm[i], fq[gnode[i]] = s_m[t], s_q[t]\n"),
    "fk_sample_scale": (P + "fill_kernels.py", "kept_c[k] /= share", "kept_c[k] *= share"),
    "fk_greedy_cores": (P + "fill_kernels.py",
                        "if fq[g_node[g]] + EPS < q or top_c[g] + EPS < c or top_m[g] + EPS < m:",
                        "if top_c[g] + EPS < c or top_m[g] + EPS < m:"),
}
TESTS = ["tests/placement/test_placement_fill_kernels.py", "tests/placement/test_placement_fill.py",
         "tests/placement/test_placement_lagrange.py", "tests/placement/test_placement_properties.py",
         "tests/placement/test_placement_live.py", "tests/placement/test_placement_hay.py",
         "tests/placement/test_placement_policies.py"]

# lagrange's kernels, demand arrays, the job check and the answer order (issue 15, the large
# size). The lagrange_* entries above whose text moved into lagrange_kernels.py (one greedy for
# both unit paths) or prices.descend (one subgradient for fill and lagrange) are replaced here.
_K = P + "lagrange_kernels.py"
MUTANTS.update({
    "lagrange_wide_cores": (_K, "if top_c[g] + _EPS < cj or top_m[g] + _EPS < mj or free_q[group_node[g]] + _EPS < qp:",
                            "if top_c[g] + _EPS < cj or top_m[g] + _EPS < mj:"),
    "lagrange_wide_one_gpu": (_K, "if free_c[i] + _EPS >= cj and free_m[i] + _EPS >= mj and free_c[i] - cj < slack - _EPS:",
                              "if free_c[i] + _EPS >= cj and free_c[i] - cj < slack - _EPS:"),
    "lagrange_group_cores": (_K, "free_q[group_node[at]] -= qp", "free_q[group_node[at]] -= 0.0"),
    "lagrange_take_memory": (_K, "free_m[pick] -= mj", "free_m[pick] -= 0.0"),
    "lagrange_best_fit": (_K, "and free_c[i] - cj < slack - _EPS:", "and pick < 0:"),
    "lagrange_tie_sign": (P + "lagrange.py", "ranked = r - TIE * _share(", "ranked = r + TIE * _share("),
    "lagrange_order": (P + "lagrange.py", "order = np.lexsort((-cu.max(axis=1), -best))",
                       "order = np.lexsort((-cu.max(axis=1), best))"),
    "lagrange_step_sign": (_K, "pq[h] = max(0.0, pq[h] - size * holder_c[h] * (1.0 - use_q[h]))",
                           "pq[h] = max(0.0, pq[h] + size * holder_c[h] * (1.0 - use_q[h]))"),
    "price_subgradient_sign": (P + "prices.py", "step = factor * (bound - aim) / norm",
                               "step = -factor * (bound - aim) / norm"),
    "lagrange_demand_per_arch": (P + "lagrange.py", "        if missing == count:\n            continue",
                                 "        if True:\n            continue"),
    "check_job_types": (P + "check.py", "if not all(issubclass(kind, Job) for kind in set(map(type, jobs))):",
                        "if False:"),
    "check_job_running": (P + "check.py", "(running and not running.keys().isdisjoint(ids))", "False"),
    "api_answer_order": (P + "api.py", "        answer = {jid: raw[jid] for jid in order}", "        answer = dict(raw)"),
})
TESTS.insert(1, "tests/placement/test_placement_lagrange_kernels.py")

# fill's Python side (issue 15): the demand table, its per-Job cache, answers in the jobs' order
_F = P + "fill_kernels.py"
MUTANTS.update({
    "demand_table_runtime": (P + "load.py", "longest = np.where(named < len(archs), top[:, 2], -np.inf)",
                             "longest = np.full(n, -np.inf)"),
    "demand_table_cache_key": (P + "load.py", 'name = "_demand_row_" + "_".join(a.encode().hex() for a in archs)',
                               'name = "_demand_row_"'),
    "fill_answer_order": (P + "fill.py", "placed = (at >= 0).nonzero()[0]", "placed = (at >= 0).nonzero()[0][::-1]"),
    "fill_density_ties": (_F, "return _order_by(_order_by(order, jc[:, 0].copy()), key)", "return _order_by(order, key)"),
})
TESTS.append("tests/placement/test_placement_load.py")

# fill's start phase (price loops over columns, shared orders, kinds): each must fail a test.
MUTANTS.update({
    "fk_kind_dead": (_F, "dead[kind[p]] = where[p] < 0", "dead[kind[p]] = True"),
    "fk_kinds_memory": (_F, "same = same and jc[o, a] == jc[p, a] and jm[o, a] == jm[p, a]",
                        "same = same and jc[o, a] == jc[p, a]"),
    "fk_order_ties": (_F, "while u > start and key[out[u - 1]] < x:", "while u > start and key[out[u - 1]] <= x:"),
    "fk_radix_negative": (_F, "b ^= 0x7FFFFFFFFFFFFFFF", "b ^= 0"),
    "fk_pref_ties": (_F, "rank[p] += rt[h, p] >= rt[g, p]", "rank[p] += rt[h, p] > rt[g, p]"),
    "fk_columns_fit": (_F, "ct[g, k] = cg[p, g] if fit[p, g] else -np.inf", "ct[g, k] = cg[p, g]"),
})

# fill's kicks and polish (the pools as every job in order, the undo journal, the stop rules,
# the refill/evict skips where they cannot gain, polish's skipped last search)
MUTANTS.update({
    "fk_undo_where": (_F, "            where[ong[i, k]] = -1\n", "            pass\n"),
    "fk_pool_member": (_F, "while k >= 0 and where[pool[a, k]] >= 0:", "while k >= 0 and where[pool[a, k]] > 0:"),
    "fk_settled": (_F, "    if unsettled or refilled or evicted:", "    if refilled or evicted:"),
    "fk_refill_full": (_F, "if npool[a] == 0 or fc[i] + 2 * EPS < min_gain:", "if npool[a] == 0 or fc[i] < 1.0:"),
    "fk_evict_full": (_F, "or fc[i] + 3 * EPS < min_gain:", "or fc[i] < 1.0:"),
    "fk_patience_gpus": (_F, "wait = max(patience, PATIENCE_PER_GPU * n_gpus)", "wait = patience"),
    "fk_kick_stop": (_F, "        if value >= stop - EPS:\n", "        if value >= stop + 1e9:\n"),
    "fk_enough_kicks": (_F, "enough * ceiling - fixed_value, best,", "np.inf, best,"),
})
TESTS.insert(0, "tests/placement/test_placement_fill_kicks.py")

# the exact LP bound (lp_kernels) and fill's use of it
_L = P + "lp_kernels.py"
MUTANTS.update({
    "lp_ratio_key": (_L, "        if -rate > PIVOT:", "        if rate > PIVOT:"),
    "lp_ratio_alone": (_L, "    if e_job >= 0 and not entering_seen:", "    if False:"),
    "lp_enter_slack": (_L, "if not slack_basic[i] and -pi[i] > best:", "if not slack_basic[i] and pi[i] > best:"),
    "lp_transposed_perm": (_L, "        out[perm[i]] = scratch[i]", "        out[i] = scratch[i]"),
    "lp_rhs_keys": (_L, "    rows[n_groups + g] += sign * tm[g, p]", "    rows[n_groups + g] += 0.0"),
    "lp_left_update": (_L, "                _use(left, before, leave_job, 1.0, tc, tm, tq, g_node, n_groups)", "                pass"),
    "lp_sigma_key": (_L, "            sigma[p] = r if key[p] == g else sigma[p]", "            sigma[p] = r if top[p] == g else sigma[p]"),
    "lp_pivot_new_key": (_L, "            key[q] = nk_var[k]\n", "            key[q] = -1\n"),
    "lp_bound_clip": (_F, "np.maximum(pc, 0.0), np.maximum(pm, 0.0), np.maximum(pq, 0.0)", "pc, pm, pq"),
    "fill_lp_used": (_F, "        low = min(low, _lp_bound(", "        low = max(low, _lp_bound("),
    "fill_density_cost": (_F, "cost = c * w_c + jq[p] * w_q + jm[p, 0] * w_m", "cost = c * w_c + jq[p] * w_q"),
    "fill_lp_pairs": (P + "fill.py", "    if len(call.singles) * len(arrays.garch) > LP_PAIRS:", "    if False:"),
    "demand_table_origin": (P + "load.py", "            origin.__dict__[name] = row", "            pass"),
    "renamed_origin_root": (P + "model.py", '        if "_origin" not in found:', "        if True:"),
})
TESTS.insert(0, "tests/placement/test_placement_lp_kernels.py")


def run(name: str) -> bool:
    """True when the mutant is killed."""
    path, old, new = MUTANTS[name]
    with tempfile.TemporaryDirectory() as tmp:
        for part in ("hypersack", "tests", "pyproject.toml"):
            src = ROOT / part
            (shutil.copytree if src.is_dir() else shutil.copy)(src, Path(tmp) / part)
        target = Path(tmp) / path
        text = target.read_text()
        if old not in text:
            raise SystemExit(f"{name}: the text to mutate is not in {path}")
        target.write_text(text.replace(old, new, 1))
        # (not the test of lp_kernels' hash in fill_kernels: any edit of lp_kernels fails it)
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                               "-k", "not holds_the_current_hash", *TESTS],
                              cwd=tmp, env={"PYTHONPATH": tmp, "PATH": "/usr/bin:/bin"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return proc.returncode != 0


def main() -> None:
    names = sys.argv[1:] or list(MUTANTS)
    survived = 0
    for name in names:
        killed = run(name)
        survived += not killed
        print(f"{name}: {'KILLED' if killed else 'SURVIVED'}", flush=True)
    sys.exit(1 if survived else 0)


if __name__ == "__main__":
    main()
