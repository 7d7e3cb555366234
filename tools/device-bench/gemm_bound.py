#!/usr/bin/env python3
"""cuBLAS bf16 GEMM time of one llama-8b prefill chunk's weight products (torch.matmul), the prefill bound."""
import json, sys, torch
T = int(sys.argv[1]) if len(sys.argv) > 1 else 512
H, I, L, KV = 4096, 14336, 32, 1024
shapes = [(H, H), (KV, H), (KV, H), (H, H), (I, H), (I, H), (H, I)]   # q k v o gate up down: [out, in]
dev = torch.device("cuda")
x = {k: torch.randn(T, k, device=dev, dtype=torch.bfloat16) for k in (H, I)}
w = [torch.randn(o, i, device=dev, dtype=torch.bfloat16) for o, i in shapes]
def layer():
    for (o, i), wt in zip(shapes, w):
        torch.matmul(x[i], wt.t())
for _ in range(5): layer()
torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
best = 1e9
for _ in range(5):
    s.record()
    for _ in range(L): layer()
    e.record(); torch.cuda.synchronize()
    best = min(best, s.elapsed_time(e) / 1000)
flops = 2 * T * L * sum(o * i for o, i in shapes)
print(json.dumps({"tokens": T, "gemm_s": best, "tflops": flops / best / 1e12, "bound_tok_s": T / best,
                  "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}))
