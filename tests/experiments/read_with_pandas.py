#!/usr/bin/env python3
"""Reads a spansim campaign result with h5py into a pandas DataFrame, as a user would (used by the tests)."""
import sys

import h5py
import pandas as pd


def main(path):
    with h5py.File(path, "r") as f:
        table = f["points"]
        columns = {}
        rank_rows = 0
        for name, data in table.items():
            columns[name] = data.asstr()[()] if h5py.check_string_dtype(data.dtype) else data[()]
        frame = pd.DataFrame(columns)
        for key in frame["key"]:
            if "stages" in f:
                assert len(f["stages"][key]["compute_s"]) > 0
            if "links" in f:
                assert f["links"][key]["bytes"].shape[1] == 2
            if "ranks" in f:
                ranks, stages = f["ranks"][key], f["stages"][key]
                pp = ranks["pp"][()]
                assert len(set(ranks["gpu"][()])) == len(pp), "a GPU runs two ranks"
                assert (ranks["compute_s"][()] == stages["compute_s"][()][pp]).all(), "rank and stage breakdowns differ"
                rank_rows = len(pp)
    frame = frame.sort_values("index")
    print("rows", len(frame))
    print("columns", len(frame.columns))
    print("step_time_sum", "%.17g" % sum(frame["step_time_s"].tolist()))
    print("ranks per point", rank_rows)
    print(frame[["index", "label.inter_region_bandwidth", "label.policy", "step_time_s"]].to_string(index=False))


if __name__ == "__main__":
    main(sys.argv[1])
