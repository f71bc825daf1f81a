"""Campaign results (the HDF5 file ``spansim campaign run`` writes) as pandas DataFrames."""
import h5py
import pandas as pd


def load(path):
    """The campaign's point table: one row per point, in point order, with its labels (``label.<axis>``), status
    and metrics (step time, tokens/s, breakdown). Failed points keep their row with NaN metrics. The file's
    attributes (campaign name, points done, spansim version) are in ``frame.attrs``."""
    from . import _path, Error
    path = _path(path, "campaign result")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise Error("%s: cannot be read as a campaign result (%s)" % (path, str(e)[:200])) from None
    with f:
        if "points" not in f:
            raise Error("%s: not a campaign result (no \"points\" table: it is written by spansim campaign run)"
                        % path)
        table = f["points"]
        columns = {}
        for name, data in table.items():
            columns[name] = data.asstr()[()] if h5py.check_string_dtype(data.dtype) else data[()]
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
    frame = pd.DataFrame(columns)
    if "index" in frame:
        frame = frame.sort_values("index").reset_index(drop=True)
    frame.attrs.update({k: (v.item() if hasattr(v, "item") else v) for k, v in attrs.items()})
    return frame
