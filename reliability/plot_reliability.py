#!/usr/bin/python3
"""Plots `spansim reliability --json` output: ETTR against the checkpoint interval (closed form, with the
interval in force, Young and Daly marked, and the Monte Carlo's ETTR) and the time lost by cause.

Usage: plot_reliability.py RESULT.json --out FIGURE.png
Needs Debian's python3-matplotlib.
"""
import argparse
import json
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
except ImportError as e:
    sys.exit("plot_reliability: %s (needs Debian's python3-matplotlib)" % e)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("result")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    with open(a.result) as f:
        doc = json.load(f)
    costs, outcome = doc["costs"], doc["outcome"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    sweep = doc.get("ettr_by_interval", [])
    if sweep:
        xs = [s["interval_s"] / 60 for s in sweep]
        left.plot(xs, [100 * s["ettr"] for s in sweep], marker="o", label="closed form (exponential failures)")
        left.set_xscale("log")
    left.axvline(costs["interval_s"] / 60, color="k", linestyle="-", linewidth=1, label="interval in force")
    if costs.get("young_s"):
        left.axvline(costs["young_s"] / 60, color="tab:orange", linestyle="--", label="Young")
    if costs.get("daly_s"):
        left.axvline(costs["daly_s"] / 60, color="tab:green", linestyle=":", label="Daly")
    left.axhline(100 * outcome["ettr"], color="tab:red", linewidth=1, label="Monte Carlo ETTR (%s)" % doc["configuration"]["recovery"])
    left.set_xlabel("checkpoint interval (min)")
    left.set_ylabel("ETTR (%)")
    left.legend(fontsize=8)
    lost = outcome["lost_s"]
    names = list(lost.keys())
    right.bar(names, [lost[n] / 3600 for n in names], color="tab:gray")
    right.set_ylabel("hours lost per run")
    right.set_title("%.1f days, %.0f interruptions" % (outcome["wall_days"], outcome["interruptions"]), fontsize=10)
    right.tick_params(axis="x", rotation=20)
    fig.suptitle("%s (spansim %s, %s)" % (doc["scenario"], doc["spansim"].get("version", "?"), doc["spansim"].get("git_hash", "?")[:12]), fontsize=10)
    fig.tight_layout()
    tmp = a.out + ".tmp.png"
    fig.savefig(tmp, dpi=120)
    os.replace(tmp, a.out)
    print("Written: %s" % a.out, file=sys.stderr)


if __name__ == "__main__":
    main()
