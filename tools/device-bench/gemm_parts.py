#!/usr/bin/env python3
"""Prefill GEMM cost of llama-8b per 512-token chunk for the ways an f32 activation can enter tensor cores:
bf16 with 1/2/3 parts (parts·T columns) and int8 (torch._int_mm = cuBLAS IMMA, int32 accumulation) with
1/2/3/4 parts, against the same weights. One JSON line per way."""
import json, sys, torch
T = int(sys.argv[1]) if len(sys.argv) > 1 else 512
H, I, L, KV = 4096, 14336, 32, 1024
shapes = [(H, H), (KV, H), (KV, H), (H, H), (I, H), (I, H), (H, I)]
dev = torch.device("cuda")
def bench(fn, reps=5):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = 1e9
    for _ in range(reps):
        s.record(); fn(); e.record(); torch.cuda.synchronize()
        best = min(best, s.elapsed_time(e) / 1000)
    return best
flops = 2 * T * L * sum(o * i for o, i in shapes)
wb = [torch.randn(o, i, device=dev, dtype=torch.bfloat16) for o, i in shapes]
for parts in (1, 2, 3):
    x = {k: torch.randn(parts * T, k, device=dev, dtype=torch.bfloat16) for k in (H, I)}
    def layer():
        for _ in range(L):
            for (o, i), wt in zip(shapes, wb): torch.matmul(x[i], wt.t())
    t = bench(layer)
    print(json.dumps({"way": "bf16", "parts": parts, "s": t, "tok_s": T / t, "eff_tflops": flops / t / 1e12}), flush=True)
del wb
wi = [torch.randint(-127, 128, (o, i), device=dev, dtype=torch.int8) for o, i in shapes]
for parts in (1, 2, 3, 4):
    x = {k: torch.randint(-127, 128, (parts * T, k), device=dev, dtype=torch.int8) for k in (H, I)}
    def layer():
        for _ in range(L):
            for (o, i), wt in zip(shapes, wi): torch._int_mm(x[i], wt.t())
    try:
        t = bench(layer)
        print(json.dumps({"way": "int8", "parts": parts, "s": t, "tok_s": T / t, "eff_tflops": flops / t / 1e12}), flush=True)
    except Exception as ex:
        print(json.dumps({"way": "int8", "parts": parts, "error": str(ex)[:300]}), flush=True)
