#!/usr/bin/python3
"""One DeepSeek-V3 MoE layer on H800, kernel class by kernel class: DeepSeek's public profile against spansim.

Runs `spansim run --json` on examples/scenarios/deepseek-v3-h800-profile.json (the profile's layout: EP 64, TP 1,
4K tokens per GPU, FP8 block scaling on DeepGEMM, DeepEP's FP8 dispatch, balanced routing, RMSNorm, the MLA
up-projections and the SwiGLU output recomputed, the attention output and SwiGLU inputs kept in E5M6 and FP8), takes
one micro-batch's
kernel classes of a pipeline stage made of MoE layers only, divides by its layers, and sets each class beside the
trace's (validation/kernels/deepseek-v3-h800-trace.json). The trace files a recomputed kernel under its own class
(a recomputed norm is a norm kernel), so spansim's recompute is added to the classes it re-runs
(`recomputed_per_micro_batch_s`), and the `recomputed` column says how much of each that is. Prints a table, or
JSON with --json.

Usage: validation/kernel_classes.py [--spansim build/spansim] [--json]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# spansim's class: the trace's classes it stands for.
MAPPING = [
    ("grouped_gemm", ["grouped_gemm_fwd", "grouped_gemm_dgrad"]),
    ("expert_wgrad", ["expert_wgrad"]),
    ("gemm", ["dense_gemm"]),
    ("wgrad", ["dense_wgrad"]),
    ("attention", ["attention"]),
    ("quantize", ["quantize_cast"]),
    ("permute", ["permute_unpermute"]),
    ("norms", ["norm"]),
    ("elementwise", ["activation_swiglu", "elementwise_other", "router"]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spansim", default=os.path.join(ROOT, "build", "spansim"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    scenario = os.path.join(ROOT, "examples", "scenarios", "deepseek-v3-h800-profile.json")
    run = subprocess.run([args.spansim, "run", scenario, "--no-outputs", "--json"], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit("spansim run failed: " + run.stderr.strip())
    result = json.loads(run.stdout)
    with open(os.path.join(HERE, "kernels", "deepseek-v3-h800-trace.json")) as f:
        trace = json.load(f)
    # A stage of MoE layers only (the first holds the three dense layers): the one with the most layers.
    stages = [s for s in result["breakdown"]["stages"] if s["stage"] > 0 and "kernels_per_micro_batch_s" in s]
    stage = max(stages, key=lambda s: (s["layers"], -s["stage"]))
    per_layer = {k: v / stage["layers"] * 1e6 for k, v in stage["kernels_per_micro_batch_s"].items()}
    recomputed = {k: v / stage["layers"] * 1e6 for k, v in stage.get("recomputed_per_micro_batch_s", {}).items()}
    cls = trace["classes"]
    rows = []
    for ours, theirs in MAPPING:
        measured = sum(cls[t]["forward_us"] + cls[t]["backward_us"] for t in theirs) if theirs else None
        if ours == "expert_wgrad":
            # Two streams at once: their wall time is the GPU time the class holds (the summed durations overlap).
            measured = trace["rates"]["expert_wgrad_wall_us"]
        again = recomputed.get(ours, 0)
        rows.append({"class": ours, "trace": theirs, "measured_us": measured,
                     "simulated_us": per_layer.get(ours, 0) + again, "recomputed_us": again})
    # The trace's figure is kernel time, so the idle between kernels (and waits on the host) stays out of the total,
    # the recompute's included: every class but the gaps and the recompute row, which the classes now hold.
    total_sim = sum(r["simulated_us"] for r in rows)
    kernels = sum(v for k, v in per_layer.items() if k not in ("kernel_gaps", "recompute"))
    kernels += sum(v for k, v in recomputed.items() if k != "kernel_gaps")
    if abs(total_sim - kernels) > 1e-6 * kernels:
        sys.exit("the classes do not add up to the stage's kernel time: a class is missing from MAPPING")
    rows.append({"class": "total", "trace": ["compute busy time"], "measured_us": trace["compute_busy_us"],
                 "simulated_us": total_sim, "recomputed_us": sum(r["recomputed_us"] for r in rows)})
    for r in rows:
        m = r["measured_us"]
        r["error"] = r["simulated_us"] / m - 1 if m else None
    out = {"stage": stage["stage"], "layers": stage["layers"], "rows": rows,
           "spansim": result.get("spansim", {}), "trace_source": trace["source"]}
    if args.json:
        json.dump(out, sys.stdout, indent=1)
        print()
        return
    print("One MoE layer of DeepSeek-V3 on H800, forward and backward (us), stage %d of the example (%d layers)"
          % (stage["stage"], stage["layers"]))
    print("%-13s %-52s %10s %10s %8s %11s" % ("spansim", "trace classes", "measured", "simulated", "error",
                                              "recomputed"))
    for r in rows:
        m = "-" if r["measured_us"] is None else "%.0f" % r["measured_us"]
        e = "-" if r["error"] is None else "%+.1f%%" % (100 * r["error"])
        print("%-13s %-52s %10s %10.0f %8s %11.0f" % (r["class"], " + ".join(r["trace"]) or "(none)", m,
                                                     r["simulated_us"], e, r["recomputed_us"]))


if __name__ == "__main__":
    main()
