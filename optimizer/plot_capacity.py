#!/usr/bin/env python3
"""Plots the long-haul capacity front of `spansim optimize` (its capacity.csv): the best step time against the
cost of each capacity choice, the Pareto front (choices faster than every cheaper one) joined by a line.

Writes PNG and SVG next to the CSV (or into --out). Needs Debian's python3-matplotlib.

Usage: plot_capacity.py CAPACITY.csv [--out DIR] [--json]
"""
import argparse
import csv
import json
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
except ImportError as e:
    sys.exit("plot_capacity: %s (needs Debian's python3-matplotlib)" % e)


def tbps(bytes_per_second):
    return float(bytes_per_second) * 8 / 1e12


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--out", help="directory for the figures (default: the CSV's)")
    parser.add_argument("--json", action="store_true", help="print what was written as one JSON document")
    args = parser.parse_args()
    try:
        with open(args.csv, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit("plot_capacity: %s" % e)
    needed = {"inter_building_Bps", "inter_region_Bps", "cost", "cost_unit", "step_s", "on_front"}
    if not rows or not needed <= set(rows[0]):
        sys.exit("plot_capacity: %s has no capacity rows (expected columns: %s)" % (args.csv, ", ".join(sorted(needed))))
    rows.sort(key=lambda r: float(r["cost"]))
    cost = [float(r["cost"]) for r in rows]
    step = [float(r["step_s"]) for r in rows]
    front = [r for r in rows if r["on_front"] == "1"]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.scatter(cost, step, color="#cfcfcf", edgecolor="#555555", zorder=2, label="capacity choice")
    ax.plot([float(r["cost"]) for r in front], [float(r["step_s"]) for r in front], "-o", color="#4c72b0", zorder=3,
            label="Pareto front")
    for r in rows:
        parts = []
        if float(r["inter_building_Bps"]) > 0:
            parts.append("ib %.0f Tbps" % tbps(r["inter_building_Bps"]))
        if float(r["inter_region_Bps"]) > 0:
            parts.append("ir %.0f Tbps" % tbps(r["inter_region_Bps"]))
        ax.annotate(", ".join(parts) or "as built", (float(r["cost"]), float(r["step_s"])), fontsize=7,
                    textcoords="offset points", xytext=(4, 4))
    ax.set_xlabel("long-haul capacity cost (%s)" % rows[0]["cost_unit"])
    ax.set_ylabel("best step time (s)")
    ax.set_title("Capacity against step time")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = args.out or os.path.dirname(os.path.abspath(args.csv))
    os.makedirs(out, exist_ok=True)
    written = []
    for ext in ("png", "svg"):
        path = os.path.join(out, "capacity." + ext)
        fig.savefig(path, dpi=150)
        written.append(path)
    if args.json:
        print(json.dumps({"written": written, "choices": len(rows), "on_front": len(front)}))
    else:
        print("written: " + ", ".join(written))


if __name__ == "__main__":
    main()
