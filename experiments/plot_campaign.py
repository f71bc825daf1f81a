#!/usr/bin/env python3
"""Plots a spansim campaign result (the HDF5 file of `spansim campaign run`).

Two figures, each as PNG and SVG: step time against a swept axis with one series per value of another axis
(e.g. the placement policy), and the step's time breakdown (mean over pipeline stages: compute, exposed
communication per dimension, bubble, idle) as stacked bars. Remaining axes with several values become panels.
Repetitions are averaged. Needs Debian's python3-matplotlib and python3-h5py (and numpy).

Usage: plot_campaign.py RESULT.h5 [--x AXIS] [--series AXIS] [--out DIR] [--json]
"""
import argparse
import itertools
import json
import os
import sys

try:
    import h5py
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.patches  # noqa: E402  (the backend must be chosen first)
    import matplotlib.pyplot as plt  # noqa: E402
    import numpy as np  # noqa: E402
except ImportError as e:
    sys.exit("plot_campaign: %s (needs Debian's python3-matplotlib, python3-h5py and python3-numpy)" % e)

COLORS = ["#4c72b0", "#dd8452", "#937860", "#da8bc3", "#c44e52", "#8172b3", "#ccb974", "#cfcfcf"]
HATCHES = ["", "//", "..", "xx", "\\\\", "oo", "--", "++"]


def axis_names(campaign):
    """Axis names in campaign order, named as spansim names them (name, or the path(s) joined by '+')."""
    names = []
    for a in campaign.get("axes", []):
        # As campaign.cpp: a missing or empty name falls back to the field path(s).
        if a.get("name"):
            names.append(a["name"])
        elif "zip" in a:
            names.append("+".join(z["path"] for z in a["zip"]))
        else:
            names.append(a["path"])
    return names


def read(path):
    """The campaign, the table of its finished ok points, the axis units and the breakdown parts (as spansim
    wrote them into the file, in order); exits with one line if unreadable."""
    if not os.path.isfile(path):
        sys.exit("plot_campaign: no file %s" % path)
    try:
        return read_table(path)
    except (OSError, KeyError, ValueError, TypeError) as e:
        sys.exit("plot_campaign: %s is not a readable spansim campaign result (%s: %s)" % (path, type(e).__name__, e))


def read_table(path):
    with h5py.File(path, "r") as f:
        fmt = f.attrs.get("format", "")
        fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
        if fmt != "spansim-campaign/1":
            raise ValueError("format %r, expected 'spansim-campaign/1'" % fmt)
        campaign = json.loads(f.attrs["campaign_json"])
        parts = [p for p in json.loads(f.attrs["breakdown_parts"]) if p != "exposed_total"]
        table = {}
        units = {}
        for name, data in f["points"].items():
            table[name] = data.asstr()[()] if h5py.check_string_dtype(data.dtype) else data[()]
            if "unit" in data.attrs:
                u = data.attrs["unit"]
                units[name] = u.decode() if isinstance(u, bytes) else str(u)
    ok = np.array([s == "ok" for s in table["status"]], dtype=bool)
    return campaign, {k: np.asarray(v)[ok] for k, v in table.items()}, units, parts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results")
    ap.add_argument("--x")
    ap.add_argument("--series")
    ap.add_argument("--out")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--provenance", default="{}")
    args = ap.parse_args()

    campaign, t, units, parts = read(args.results)
    names = axis_names(campaign)
    if len(t["index"]) == 0:
        sys.exit("plot_campaign: %s has no finished point to plot" % args.results)
    numeric = [n for n in names if t["axis." + n].dtype.kind == "f"]
    x = args.x or (numeric[0] if numeric else (names[0] if names else None))
    if x is None:
        sys.exit("plot_campaign: the campaign has no axis to plot against")
    if x not in names:
        sys.exit("plot_campaign: no axis \"%s\" (axes: %s)" % (x, ", ".join(names)))
    others = [n for n in names if n != x]
    series = args.series or (others[0] if others else None)
    if series is not None and series not in names:
        sys.exit("plot_campaign: no axis \"%s\" (axes: %s)" % (series, ", ".join(names)))
    facets = [n for n in others if n != series]

    def values(name):
        """Distinct values of an axis in campaign order (first appearance by point index)."""
        seen = []
        for v in t["label." + name][np.argsort(t["index"])]:
            if v not in seen:
                seen.append(v)
        return seen

    x_is_numeric = t["axis." + x].dtype.kind == "f"
    x_labels = values(x)
    x_unit = units.get("axis." + x, "")
    series_values = values(series) if series else [None]
    facet_values = list(itertools.product(*[values(f) for f in facets])) or [()]

    def select(facet, s):
        m = np.ones(len(t["index"]), dtype=bool)
        for name, v in zip(facets, facet):
            m &= t["label." + name] == v
        if series:
            m &= t["label." + series] == s
        return m

    def mean_at(m, column, label):
        mm = m & (t["label." + x] == label)
        return float(np.mean(t[column][mm])) if mm.any() else float("nan")

    ncols = min(3, len(facet_values))
    nrows = (len(facet_values) + ncols - 1) // ncols
    stem = os.path.splitext(os.path.basename(args.results))[0]
    out = args.out or os.path.dirname(os.path.abspath(args.results))
    os.makedirs(out, exist_ok=True)
    xlabel = x + (" (%s)" % x_unit if x_unit else "")
    written = []

    def title(facet):
        return ", ".join("%s=%s" % (n, v) for n, v in zip(facets, facet))

    def finish(fig, axes, what, name):
        # Blanks the panels past the last facet, titles the figure, writes it as PNG and SVG.
        for ax in axes.flatten()[len(facet_values):]:
            ax.axis("off")
        fig.suptitle("%s: %s" % (campaign["name"], what))
        fig.tight_layout()
        for ext in ("png", "svg"):
            p = os.path.join(out, "%s-%s.%s" % (stem, name, ext))
            fig.savefig(p, dpi=120)
            written.append(p)
        plt.close(fig)

    # Step time against x.
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.8 * nrows), squeeze=False)
    for k, facet in enumerate(facet_values):
        ax = axes[k // ncols][k % ncols]
        for s in series_values:
            m = select(facet, s)
            xs = [float(t["axis." + x][m & (t["label." + x] == lab)][0]) if x_is_numeric and (m & (t["label." + x] == lab)).any()
                  else i for i, lab in enumerate(x_labels)]
            ys = [mean_at(m, "step_time_s", lab) for lab in x_labels]
            ax.plot(xs, ys, marker="o", label=s if s is not None else "step time")
        if x_is_numeric:
            xv = t["axis." + x]
            if np.all(xv > 0) and xv.max() / xv.min() >= 10:
                ax.set_xscale("log")
        else:
            ax.set_xticks(range(len(x_labels)), x_labels, rotation=20)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("step time (s)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        if facets:
            ax.set_title(title(facet), fontsize=9)
        if series:
            ax.legend(title=series, fontsize=8)
    finish(fig, axes, "step time", "step_time")

    # Breakdown as stacked bars: a group per x value, a bar per series (told apart by hatching).
    # Wide panels (a bar per x value and series), so one per row.
    ncols, nrows = 1, len(facet_values)
    fig, axes = plt.subplots(nrows, ncols, figsize=(max(6.0, 0.45 * len(x_labels) * len(series_values) + 3),
                                                    4.2 * nrows), squeeze=False)
    width = 0.8 / len(series_values)
    for k, facet in enumerate(facet_values):
        ax = axes[k // ncols][k % ncols]
        for j, s in enumerate(series_values):
            m = select(facet, s)
            pos = np.arange(len(x_labels)) - 0.4 + width * (j + 0.5)
            bottom = np.zeros(len(x_labels))
            for p, part in enumerate(parts):
                h = np.array([mean_at(m, part + "_mean_s", lab) for lab in x_labels])
                h = np.nan_to_num(h)
                ax.bar(pos, h, width * 0.95, bottom=bottom, color=COLORS[p % len(COLORS)], hatch=HATCHES[j % len(HATCHES)],
                       edgecolor="white", linewidth=0.5, label=part if j == 0 else None)
                bottom += h
        ax.set_xticks(range(len(x_labels)), x_labels, rotation=20)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("time per step (s), mean over stages")
        ax.grid(True, axis="y", alpha=0.3)
        if facets:
            ax.set_title(title(facet), fontsize=9)
        handles, labels = ax.get_legend_handles_labels()
        if series:
            for j, s in enumerate(series_values):
                handles.append(matplotlib.patches.Patch(facecolor="white", edgecolor="black",
                                                        hatch=HATCHES[j % len(HATCHES)]))
                labels.append("%s=%s" % (series, s))
        ax.legend(handles, labels, fontsize=7, ncol=2)
    finish(fig, axes, "where the step goes", "breakdown")

    if args.json:
        print(json.dumps({"spansim": json.loads(args.provenance), "results": args.results, "x": x,
                          "series": series, "panels": facets, "figures": written}, indent=2))
    else:
        for p in written:
            print("wrote", p)


if __name__ == "__main__":
    main()
