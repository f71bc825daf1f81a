#!/usr/bin/env python3
"""Measures the kernel tables shipped under workload/gpus/measured/ on one GPU with PyTorch.

Writes, into the folder given as the first argument:
  gemm.csv            op,m,n,k,dtype,seconds    BF16 (torch.matmul) and FP8 e4m3 with per-tensor scales
                                                (torch._scaled_mm), the table format of `measured_kernels`
  gemm-fp8-recipes.csv m,n,k,recipe,seconds     FP8 GEMMs by scaling granularity: tensor, row (1 x K and
                                                K x 1 scales), block (1x128 activations, 128x128 weights)
  attention-flash.csv pass,sequence,heads,head_dim,seconds   causal SDPA, flash backend (FlashAttention-2)
  attention-cudnn.csv the same, cuDNN backend
  elementwise.csv     kernel,bytes,seconds      memory-bound kernels: copy, RMSNorm, FP8 casts by recipe
  meta.json           GPU, clocks, power limit, library versions, method

Method: CUDA events around `reps` back-to-back calls after `warmup` calls, the mean per call; inputs drawn
from a normal distribution (BF16). Nothing here runs in CI: the tables are data, measured once per GPU.
"""
import json
import os
import subprocess
import sys
import time

import torch

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
BUDGET = float(sys.argv[2]) if len(sys.argv) > 2 else 400.0  # seconds for the whole script
os.makedirs(OUT, exist_ok=True)
T0 = time.time()
dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = False


def left():
    return BUDGET - (time.time() - T0)


def timed(fn, warmup=2, reps=8, target=0.25):
    """Mean seconds per call; reps shrink so that one shape takes about `target` seconds."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    torch.cuda.synchronize()
    one = a.elapsed_time(b) / 1e3
    n = max(2, min(reps, int(target / max(one, 1e-6))))
    a.record()
    for _ in range(n):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / 1e3 / n


def smi(fields):
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=" + fields, "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:  # noqa: BLE001
        return "unavailable: %s" % e


meta = {
    "gpu": torch.cuda.get_device_name(0),
    "sms": torch.cuda.get_device_properties(0).multi_processor_count,
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "cudnn": torch.backends.cudnn.version(),
    "smi_before": smi("name,driver_version,power.limit,clocks.max.sm,clocks.sm,clocks.mem,temperature.gpu"),
    "method": "CUDA events around back-to-back calls after 2 warm-ups, mean per call; random normal BF16 inputs",
    "script": "scripts/measure_kernels.py",
}
print(json.dumps(meta), flush=True)

# ---- elementwise (memory bound) ----
rows = []
for n in (1 << 24, 1 << 27):
    x = torch.randn(n // 4096, 4096, device=dev, dtype=torch.bfloat16)
    w = torch.ones(4096, device=dev, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    rows.append(("copy_bf16", 4 * n, timed(lambda: y.copy_(x))))
    rows.append(("rmsnorm_bf16", 4 * n, timed(lambda: torch.nn.functional.rms_norm(x, (4096,), w))))
    f8 = torch.float8_e4m3fn
    s = torch.tensor(2.0, device=dev)
    rows.append(("cast_fp8_delayed", 3 * n, timed(lambda: (x * s).to(f8))))
    rows.append(("cast_fp8_current", 5 * n, timed(lambda: (x * (448.0 / x.abs().amax().float())).to(f8))))
    xb = x.view(-1, 128)
    rows.append(("cast_fp8_block128", 3 * n,
                 timed(lambda: (xb * (448.0 / xb.abs().amax(dim=1, keepdim=True).float())).to(f8))))
    del x, y, xb
with open(os.path.join(OUT, "elementwise.csv"), "w") as f:
    f.write("kernel,bytes,seconds\n")
    for k, b, t in rows:
        f.write("%s,%d,%.6e\n" % (k, b, t))
print("elementwise done %.0fs" % (time.time() - T0), flush=True)

# ---- GEMMs ----
MS = [256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
NS = [512, 1024, 2048, 4096, 8192, 16384, 28672, 53248]
KS = [512, 1024, 2048, 4096, 8192, 16384]
f8 = torch.float8_e4m3fn
one = torch.tensor(1.0, device=dev)
gemm = open(os.path.join(OUT, "gemm.csv"), "w")
gemm.write("# %s, torch %s, CUDA %s; scripts/measure_kernels.py\nop,m,n,k,dtype,seconds\n"
           % (meta["gpu"], meta["torch"], meta["cuda"]))
rec = open(os.path.join(OUT, "gemm-fp8-recipes.csv"), "w")
rec.write("m,n,k,recipe,seconds\n")
gemm_budget_end = T0 + 0.45 * BUDGET
for k in KS:
    for n in NS:
        b = torch.randn(n, k, device=dev, dtype=torch.bfloat16)  # weights as N x K (nn.Linear)
        b8 = b.to(f8)
        for m in MS:
            if time.time() > gemm_budget_end:
                break
            a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            t = timed(lambda: torch.matmul(a, b.t()))
            gemm.write("gemm,%d,%d,%d,bf16,%.6e\n" % (m, n, k, t))
            a8 = a.to(f8)
            try:
                t = timed(lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
                gemm.write("gemm,%d,%d,%d,fp8,%.6e\n" % (m, n, k, t))
                rec.write("%d,%d,%d,tensor,%.6e\n" % (m, n, k, t))
            except Exception as e:  # noqa: BLE001
                print("fp8 tensor %d %d %d: %s" % (m, n, k, e), flush=True)
            if m in (1024, 8192) and n in (4096, 16384, 53248):
                try:
                    sa = torch.ones(m, 1, device=dev)
                    sb = torch.ones(1, n, device=dev)
                    t = timed(lambda: torch._scaled_mm(a8, b8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16))
                    rec.write("%d,%d,%d,row,%.6e\n" % (m, n, k, t))
                except Exception as e:  # noqa: BLE001
                    print("fp8 row: %s" % e, flush=True)
                try:
                    # DeepSeek-V3's blocks: 1x128 on activations (M x K/128), 128x128 on weights.
                    sa = torch.ones(k // 128, m, device=dev).t()
                    sb = torch.ones(k // 128, n // 128, device=dev)
                    t = timed(lambda: torch._scaled_mm(a8, b8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16))
                    rec.write("%d,%d,%d,block,%.6e\n" % (m, n, k, t))
                except Exception as e:  # noqa: BLE001
                    rec.write("# block %d,%d,%d refused: %s\n" % (m, n, k, str(e).splitlines()[0][:120]))
            del a, a8
        gemm.flush()
        rec.flush()
        del b, b8
    print("gemm k=%d done %.0fs" % (k, time.time() - T0), flush=True)
gemm.close()
rec.close()
torch.cuda.empty_cache()

# ---- attention ----
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

SEQ = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
    f = open(os.path.join(OUT, "attention-%s.csv" % name), "w")
    f.write("# %s, torch %s, cuDNN %s, SDPA %s backend, causal, BF16; scripts/measure_kernels.py\n"
            "pass,sequence,heads,head_dim,seconds\n" % (meta["gpu"], meta["torch"], meta["cudnn"], name))
    for d, heads in ((128, 16), (128, 4), (128, 64), (64, 16)):
        for s in SEQ:
            if left() < 30:
                print("attention: budget left %.0fs, stopping at %s %d %d" % (left(), name, d, s), flush=True)
                break
            batch = max(1, 32768 // s)
            try:
                q = torch.randn(batch, heads, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
                kk = torch.randn_like(q, requires_grad=True)
                v = torch.randn_like(q, requires_grad=True)
                with sdpa_kernel([backend]):
                    fw = timed(lambda: torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=True),
                               reps=6, target=0.4)
                    o = torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=True)
                    g = torch.randn_like(o)

                    def fb():
                        torch.autograd.grad(o, (q, kk, v), g, retain_graph=True)

                    bw = timed(fb, warmup=1, reps=4, target=0.6)
                f.write("forward,%d,%d,%d,%.6e\n" % (s, heads, d, fw / batch))
                f.write("backward,%d,%d,%d,%.6e\n" % (s, heads, d, bw / batch))
                f.flush()
                del q, kk, v, o, g
            except Exception as e:  # noqa: BLE001
                f.write("# %d %d refused: %s\n" % (s, d, str(e).splitlines()[0][:160]))
                print("attention %s %d %d: %s" % (name, s, d, str(e)[:200]), flush=True)
            torch.cuda.empty_cache()
        print("attention %s d=%d h=%d done %.0fs" % (name, d, heads, time.time() - T0), flush=True)
    f.close()

meta["smi_after"] = smi("clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active")
meta["seconds"] = time.time() - T0
with open(os.path.join(OUT, "meta.json"), "w") as f:
    json.dump(meta, f, indent=1)
print("all done %.0fs" % meta["seconds"], flush=True)
