#!/usr/bin/python3
"""Writes examples/topologies/torus-of-pods.graphml: a 4 x 4 torus of pods over two buildings (not a tree).

Each pod is 16 HGX H100 nodes (128 GPUs), rail-optimized: one leaf per rail, every leaf up to the pod switch.
The pod switches form a 2-D torus; columns 0-1 are building "west", columns 2-3 building "east", so the torus
links between columns 1-2 and 3-0 cross the building boundary (3 km of fiber). Speeds as the shipped H100
presets give them (topology/presets/two-buildings.json's sources): NVLink 450 GB/s x 0.82, NIC 400 Gb/s x 0.94.
Usage: /usr/bin/python3 scripts/make_torus_graph.py [OUT.graphml]
"""
import sys

SIDE, NODES, GPN = 4, 16, 8
NVLINK = "369GBps"      # 450 GB/s x NCCL efficiency 0.82
NIC = "376Gbps"         # 400 Gb/s x NCCL efficiency 0.94
LEAF_UP = "6.4Tbps"     # 16 GPUs x 400 Gb/s: a non-blocking leaf
TORUS = "12.8Tbps"      # 32 x 400G between neighbouring pod switches
INSIDE, ACROSS = "2us", "17us"  # switching; 3 km x 5 us/km + 2 us


def building(x):
    return "west" if x < SIDE // 2 else "east"


def main(out_path):
    nodes, edges = [], []
    for x in range(SIDE):
        for y in range(SIDE):
            pod, b = f"pod{x}{y}", building(x)
            for n in range(NODES):
                node = f"{b}/{pod}/node{n}"
                for g in range(GPN):
                    nodes.append((f"{node}/gpu{g}", {"kind": "gpu", "building": b, "pod": pod, "node": node}))
            for n in range(NODES):
                nodes.append((f"{b}/{pod}/node{n}/nvswitch", {"kind": "nvswitch", "building": b}))
            for r in range(GPN):
                nodes.append((f"{b}/{pod}/leaf{r}", {"kind": "leaf", "building": b}))
            nodes.append((f"{b}/{pod}/switch", {"kind": "spine", "building": b}))
            for n in range(NODES):
                for g in range(GPN):
                    edges.append((f"{b}/{pod}/node{n}/gpu{g}", f"{b}/{pod}/node{n}/nvswitch", NVLINK, "0.5us", "nvlink"))
            for n in range(NODES):
                for g in range(GPN):
                    edges.append((f"{b}/{pod}/node{n}/gpu{g}", f"{b}/{pod}/leaf{g}", NIC, "1us", "nic"))
            for r in range(GPN):
                edges.append((f"{b}/{pod}/leaf{r}", f"{b}/{pod}/switch", LEAF_UP, "1us", "leaf_spine"))
    for x in range(SIDE):
        for y in range(SIDE):
            here = f"{building(x)}/pod{x}{y}/switch"
            for nx, ny in (((x + 1) % SIDE, y), (x, (y + 1) % SIDE)):
                there = f"{building(nx)}/pod{nx}{ny}/switch"
                across = building(x) != building(nx)
                edges.append((here, there, TORUS, ACROSS if across else INSIDE,
                              "inter_building" if across else "pod_aggregation"))
    with open(out_path, "w") as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n<graphml xmlns="http://graphml.graphdrawing.org/xmlns">\n')
        for key in ("kind", "building", "pod", "node"):
            f.write(f'  <key id="{key}" for="node" attr.name="{key}" attr.type="string"/>\n')
        for key in ("bandwidth", "latency", "tier"):
            f.write(f'  <key id="{key}" for="edge" attr.name="{key}" attr.type="string"/>\n')
        f.write('  <graph id="torus-of-pods" edgedefault="undirected">\n')
        for name, data in nodes:
            f.write(f'    <node id="{name}">' + "".join(f'<data key="{k}">{v}</data>' for k, v in data.items())
                    + "</node>\n")
        for a, b, bw, lat, tier in edges:
            f.write(f'    <edge source="{a}" target="{b}"><data key="bandwidth">{bw}</data>'
                    f'<data key="latency">{lat}</data><data key="tier">{tier}</data></edge>\n')
        f.write("  </graph>\n</graphml>\n")
    print(f"wrote {len(nodes)} vertices and {len(edges)} links to {out_path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "examples/topologies/torus-of-pods.graphml")
