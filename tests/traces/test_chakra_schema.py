"""spansim's exported ETs decoded with Chakra's own schema (traces/et_def.proto, upstream's file, which spansim's C++
compiles too) through Debian's protobuf for Python: what ASTRA-sim and Chakra's tools read, not spansim's reader."""
import json
import os
import subprocess
import sys
import tempfile

from google.protobuf.internal.decoder import _DecodeVarint32

SOURCE = os.environ.get("SPANSIM_SOURCE_DIR", os.getcwd())
BINARY = os.environ.get("SPANSIM_BINARY", os.path.join(SOURCE, "build", "spansim"))


def chakra_schema(tmp):
    """Chakra's et_def.proto compiled for Python with Debian's protoc."""
    proto_dir = os.path.join(SOURCE, "traces")
    subprocess.run(["protoc", "--python_out=" + tmp, "-I" + proto_dir, "et_def.proto"], check=True)
    sys.path.insert(0, tmp)
    import et_def_pb2  # noqa: E402

    return et_def_pb2


def decode(pb, path):
    """The global metadata and the nodes of one ET: a varint32 length before each message."""
    data = open(path, "rb").read()
    pos, messages = 0, []
    while pos < len(data):
        size, pos = _DecodeVarint32(data, pos)
        messages.append(data[pos : pos + size])
        pos += size
    meta = pb.GlobalMetadata()
    meta.ParseFromString(messages[0])
    nodes = []
    for m in messages[1:]:
        n = pb.Node()
        n.ParseFromString(m)
        nodes.append(n)
    return meta, nodes


def attrs(node):
    out = {}
    for a in node.attr:
        out[a.name] = getattr(a, a.WhichOneof("value"))
    return out


def test_exported_ets_decode_with_chakras_schema():
    with tempfile.TemporaryDirectory() as tmp:
        pb = chakra_schema(tmp)
        out = os.path.join(tmp, "et")
        subprocess.run(
            [BINARY, "workload", "export-chakra", os.path.join(SOURCE, "examples", "scenarios",
                                                               "llama3-8b-two-regions-dp.json"),
             "--out", out, "--representatives"],
            check=True, stdout=subprocess.DEVNULL)
        files = sorted(f for f in os.listdir(out) if f.endswith(".et"))
        assert files, "no ET written"
        types = {}
        gathers = 0
        for f in files:
            meta, nodes = decode(pb, os.path.join(out, f))
            assert any(a.name == "spansim_job" for a in meta.attr)
            for n in nodes:
                t = pb.NodeType.Name(n.type)
                types[t] = types.get(t, 0) + 1
                a = attrs(n)
                assert a["is_cpu_op"] is False
                if n.type == pb.COMP_NODE:
                    assert n.duration_micros == round(a["spansim_seconds"] * 1e6)
                elif n.type == pb.COMM_COLL_NODE:
                    # ASTRA-sim's sizes: an all-gather's comm_size is each rank's input, the others the buffer.
                    total = a["spansim_bytes"] * a["spansim_count"]
                    expected = total / a["spansim_group_size"] if a["comm_type"] == pb.ALL_GATHER else total
                    assert a["comm_size"] == round(expected), (f, n.id, a)
                    assert a["pg_name"] not in ("", "0")
                    gathers += a["comm_type"] == pb.ALL_GATHER
                else:
                    assert {"comm_src", "comm_dst", "comm_tag", "comm_size"} <= a.keys()
        print("decoded with Chakra's schema:", len(files), "files", types, gathers, "all-gathers")
        assert types.get("COMP_NODE", 0) > 0 and types.get("COMM_COLL_NODE", 0) > 0 and gathers > 0


def test_astra_sims_microbenchmark_reads_as_spansim_reads_it():
    """The published 16-NPU all-gather, decoded with Chakra's schema: comm_size 1 MiB per rank, no pg_name; spansim
    gathers 16 MiB from it (`workload describe --json` of a job naming the trace)."""
    with tempfile.TemporaryDirectory() as tmp:
        pb = chakra_schema(tmp)
        prefix = os.path.join(SOURCE, "tests", "data", "foreign", "astra-sim", "all_gather_16npus_1MB", "all_gather")
        _, nodes = decode(pb, prefix + ".0.et")
        a = attrs(nodes[0])
        assert a["comm_type"] == pb.ALL_GATHER and a["comm_size"] == 1 << 20 and "pg_name" not in a
        job = os.path.join(tmp, "job.json")
        with open(job, "w") as f:
            json.dump({"name": "ag", "kind": "chakra", "trace": prefix, "gpu": "h100"}, f)
        out = subprocess.run([BINARY, "workload", "describe", job, "--json"], check=True, capture_output=True, text=True)
        dp = json.loads(out.stdout)["traffic"]["dp"]
        assert dp["buffer_per_gpu_bytes"] == 16 * (1 << 20)
        assert dp["per_gpu_max_bytes"] == 15 * (1 << 20)  # a ring all-gather sends (N - 1)/N of the buffer
