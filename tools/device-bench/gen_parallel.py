#!/usr/bin/env python3
"""Runs make_bench_model.py's own writer, one shard per process (same tensors, same bytes per tensor)."""
import os, sys, time, json, struct, multiprocessing as mp
# make_bench_model.py (../shared/tools) must sit next to this file or in $MAKE_BENCH_MODEL_DIR
sys.path.insert(0, os.environ.get("MAKE_BENCH_MODEL_DIR", os.path.dirname(os.path.abspath(__file__))))
import numpy as np
import make_bench_model as m

def build_args(argv):
    # reuse the script's own argument handling: run main() with the writer stubbed, capture `a`
    captured = {}
    real = m.write_safetensors
    m.write_safetensors = lambda out, a: captured.setdefault("a", a) and []
    try:
        m.main(argv)
    finally:
        m.write_safetensors = real
    return captured["a"]

def write_shard(job):
    path, header_bytes, tensors, a = job
    t0 = time.time()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for name, shape, kind in tensors:
            m.write_tensor_data(f, name, shape, kind, a)
    return path, time.time() - t0

def main():
    a = build_args(sys.argv[1:])
    st_dtype, esz = m.DTYPES[a.dtype]
    plan = m.tensor_plan(a)
    max_shard = int(a.max_shard_gb * (1 << 30))
    shards = [[]]; size = 0
    for t in plan:
        nb = int(np.prod(t[1])) * esz
        if shards[-1] and size + nb > max_shard:
            shards.append([]); size = 0
        shards[-1].append(t); size += nb
    nsh = len(shards); jobs = []; weight_map = {}; total = 0
    for si, shard in enumerate(shards):
        fname = "model.safetensors" if nsh == 1 else f"model-{si + 1:05d}-of-{nsh:05d}.safetensors"
        header = {"__metadata__": {"format": "pt"}}; off = 0
        for name, shape, _ in shard:
            nb = int(np.prod(shape)) * esz
            header[name] = {"dtype": st_dtype, "shape": list(shape), "data_offsets": [off, off + nb]}
            off += nb; weight_map[name] = fname
        hb = json.dumps(header, separators=(",", ":")).encode()
        hb += b" " * ((8 - len(hb) % 8) % 8)
        total += off
        jobs.append((os.path.join(a.out, fname), hb, shard, a))
    if nsh > 1:
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    t0 = time.time()
    with mp.Pool(min(len(jobs), os.cpu_count())) as pool:
        for path, dt in pool.imap_unordered(write_shard, jobs):
            print(f"  wrote {os.path.basename(path)} in {dt:.1f}s", file=sys.stderr)
    print(f"{nsh} shards, {total / 1e9:.2f} GB in {time.time() - t0:.1f}s", file=sys.stderr)

if __name__ == "__main__":
    main()
