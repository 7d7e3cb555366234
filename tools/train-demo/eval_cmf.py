#!/usr/bin/env python3
"""Held-out perplexity of a CMF file through our own engine (`cmf logits`), next to transformers'
on the HF checkpoint it was converted from, over the same windows of the held-out ids.

  python3 eval_cmf.py --cmf models/default.cmf --hf /path/to/hf --data work/data --windows 8

Needs numpy; torch + transformers for the HF side (skipped with --no-hf). Slow on 2 cores: a
512-token window is one `cmf logits` call (JVM start + prefill).
"""
import argparse
import lzma
import math
import os
import subprocess
import tempfile

import numpy as np


def log_softmax_nll(logits: np.ndarray, targets: np.ndarray) -> float:
    m = logits.max(axis=1, keepdims=True)
    lse = (m[:, 0] + np.log(np.exp(logits - m).sum(axis=1)))
    return float((lse - logits[np.arange(len(targets)), targets]).sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cmf", required=True)
    ap.add_argument("--hf")
    ap.add_argument("--data", required=True)
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--cmf-cmd", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cmf"))
    args = ap.parse_args()
    path = os.path.join(args.data, "valid.u16")
    ids = np.fromfile(path, dtype="<u2") if os.path.exists(path) else \
        np.frombuffer(lzma.open(path + ".xz").read(), dtype="<u2")
    # windows spread evenly over the held-out set
    n_total = (ids.size - 1) // args.seq
    picks = np.linspace(0, n_total - 1, args.windows).astype(int)
    cmf_nll = hf_nll = 0.0
    count = 0
    hf_model = None
    if args.hf:
        import torch
        from transformers import Qwen3ForCausalLM
        hf_model = Qwen3ForCausalLM.from_pretrained(args.hf, dtype=torch.float32).eval()
    with tempfile.TemporaryDirectory() as tmp:
        for w in picks:
            win = ids[w * args.seq: w * args.seq + args.seq + 1].astype(np.int64)
            x, y = win[:-1], win[1:]
            out = os.path.join(tmp, "l.npy")
            subprocess.run([args.cmf_cmd, "logits", args.cmf, "--ids", ",".join(map(str, x)), "--out", out],
                           check=True, capture_output=True)
            cmf_nll += log_softmax_nll(np.load(out).astype(np.float64), y)
            if hf_model is not None:
                import torch
                with torch.no_grad():
                    lg = hf_model(input_ids=torch.from_numpy(x)[None]).logits[0].double().numpy()
                hf_nll += log_softmax_nll(lg, y)
            count += y.size
            print(f"window {w}: cmf ppl so far {math.exp(cmf_nll / count):.3f}"
                  + (f", transformers {math.exp(hf_nll / count):.3f}" if hf_model is not None else ""), flush=True)
    print(f"{count} tokens in {len(picks)} windows: cmf loss {cmf_nll / count:.4f} ppl {math.exp(cmf_nll / count):.3f}"
          + (f"; transformers loss {hf_nll / count:.4f} ppl {math.exp(hf_nll / count):.3f}" if hf_model else ""))


if __name__ == "__main__":
    main()
