#!/usr/bin/env python3
"""Random PEFT LoRA folders shaped like train_skills.py's "mlp4" adapters (gate/up/down of layers 4-7, r 32), for
a CPU dry run of eval_skills.py before the GPU has trained the real ones. numpy only."""
import argparse
import json
import os
import struct

import numpy as np

SHAPES = {"gate_proj": (1152, 384), "up_proj": (1152, 384), "down_proj": (384, 1152)}


def write_safetensors(path, tensors):
    header, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, help="writes OUT/mlp4/{python,man,info}/")
    ap.add_argument("--r", type=int, default=32)
    args = ap.parse_args()
    for k, d in enumerate(["python", "man", "info"]):
        rng = np.random.default_rng(k)
        folder = os.path.join(args.out, "mlp4", d)
        os.makedirs(folder, exist_ok=True)
        ts = {}
        for layer in range(4, 8):
            for m, (out, inp) in SHAPES.items():
                key = f"base_model.model.model.layers.{layer}.mlp.{m}"
                ts[key + ".lora_A.weight"] = rng.normal(0, 1 / np.sqrt(inp), (args.r, inp))
                ts[key + ".lora_B.weight"] = rng.normal(0, 2e-3, (out, args.r))
        write_safetensors(os.path.join(folder, "adapter_model.safetensors"), ts)
        with open(os.path.join(folder, "adapter_config.json"), "w") as f:
            json.dump({"peft_type": "LORA", "r": args.r, "lora_alpha": args.r, "bias": "none", "use_dora": False,
                       "fan_in_fan_out": False, "use_rslora": False, "task_type": "CAUSAL_LM",
                       "target_modules": r"model\.layers\.[4-7]\.mlp\.(gate_proj|up_proj|down_proj)"}, f, indent=1)


if __name__ == "__main__":
    main()
