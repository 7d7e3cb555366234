#!/usr/bin/env python3
"""Carry a trained Hugging Face folder back from the GPU machine in at most 64 MiB (numpy only).

The device tool returns at most 8 files of 16 MiB (64 MiB together) from $OUT, so a model of ~100M
parameters does not come back in bf16 (200 MB). `pack` stores every large 2-D weight in 4 bits
(symmetric, one fp16 scale per 32 weights: 4.5 bits a weight, round to nearest) and the rest in bf16,
tars it with the folder's small files and splits it into parts; `unpack` puts the parts back together
and writes model.safetensors in bf16 with the 4-bit weights dequantized. The model that comes back is
that rounded model (the same for plain decoding and for drafting, so comparisons between them hold);
its held-out loss is not the trained model's.

  python3 transport.py pack /tmp/hf $OUT --max-mib 60      # on the GPU machine, after train.py
  python3 transport.py unpack DIR_WITH_PARTS work/hf_mtp    # here; then cmf convert work/hf_mtp ...
"""
from __future__ import annotations

import argparse
import io
import json
import os
import struct
import tarfile

import numpy as np

SMALL_FILES = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "train_log.json", "check.json"]


def read_safetensors(path: str) -> dict[str, tuple[str, list[int], np.ndarray]]:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        out[name] = (meta["dtype"], meta["shape"], np.frombuffer(data[a:b], dtype=np.uint8))
    return out


def write_safetensors(path: str, tensors: dict[str, tuple[str, list[int], bytes]]):
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, raw in tensors.values():
            f.write(raw)


def to_f32(dtype: str, raw: np.ndarray) -> np.ndarray:
    if dtype == "BF16":
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    if dtype == "F16":
        return raw.view("<f2").astype(np.float32)
    if dtype == "F32":
        return raw.view("<f4").copy()
    raise SystemExit(f"cannot carry dtype {dtype}")


def to_bf16(x: np.ndarray) -> bytes:
    u = x.astype(np.float32).view(np.uint32)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16   # round to nearest even
    return u.astype("<u2").tobytes()


def quantize4(w: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray]:
    """[rows, cols] -> nibbles packed two a byte [rows, cols/2] and fp16 scales [rows, cols/group]."""
    rows, cols = w.shape
    g = w.reshape(rows, cols // group, group)
    scale = np.abs(g).max(axis=2) / 7.0
    scale = scale.astype(np.float16)
    s = scale.astype(np.float32)
    q = np.clip(np.rint(g / np.where(s == 0, 1, s)[:, :, None]), -7, 7).astype(np.int8) + 8
    q = q.reshape(rows, cols).astype(np.uint8)
    return (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8), scale


def dequantize4(packed: np.ndarray, scale: np.ndarray, group: int) -> np.ndarray:
    rows = packed.shape[0]
    q = np.empty((rows, packed.shape[1] * 2), dtype=np.int8)
    q[:, 0::2] = (packed & 15).astype(np.int8) - 8
    q[:, 1::2] = (packed >> 4).astype(np.int8) - 8
    g = q.reshape(rows, -1, group).astype(np.float32) * scale.astype(np.float32)[:, :, None]
    return g.reshape(rows, -1)


def pack(args):
    tensors = read_safetensors(os.path.join(args.src, "model.safetensors"))
    index, blobs, off = {}, [], 0
    kept = quant = 0
    for name, (dtype, shape, raw) in tensors.items():
        x = to_f32(dtype, raw)
        if len(shape) == 2 and shape[1] % args.group == 0 and x.size >= args.min_elements:
            p, s = quantize4(x.reshape(shape), args.group)
            parts = [p.tobytes(), s.astype("<f2").tobytes()]
            index[name] = {"kind": "q4", "shape": shape, "group": args.group, "offset": off,
                           "sizes": [len(parts[0]), len(parts[1])]}
            quant += x.size
        else:
            parts = [to_bf16(x)]
            index[name] = {"kind": "bf16", "shape": shape, "offset": off, "sizes": [len(parts[0])]}
            kept += x.size
        for b in parts:
            blobs.append(b)
            off += len(b)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add(name: str, data: bytes):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        add("index.json", json.dumps(index).encode())
        add("weights.bin", b"".join(blobs))
        for f in SMALL_FILES:
            p = os.path.join(args.src, f)
            if os.path.exists(p):
                with open(p, "rb") as fh:
                    add(f, fh.read())
    data = buf.getvalue()
    mib = len(data) / 2 ** 20
    print(f"packed {quant:,} weights in 4 bits and {kept:,} in bf16: {mib:.1f} MiB", flush=True)
    if mib > args.max_mib:
        raise SystemExit(f"{mib:.1f} MiB is over --max-mib {args.max_mib}: the device tool returns at most 64 MiB;"
                         f" train a smaller model")
    os.makedirs(args.dst, exist_ok=True)
    part = args.part_mib * 2 ** 20
    for i in range(0, len(data), part):
        with open(os.path.join(args.dst, f"model.pack.part-{i // part:02d}"), "wb") as f:
            f.write(data[i:i + part])


def unpack(args):
    names = sorted(n for n in os.listdir(args.src) if n.startswith("model.pack.part-"))
    if not names:
        raise SystemExit(f"no model.pack.part-* in {args.src}")
    data = b"".join(open(os.path.join(args.src, n), "rb").read() for n in names)
    os.makedirs(args.dst, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        index = json.loads(tar.extractfile("index.json").read())
        weights = tar.extractfile("weights.bin").read()
        for f in SMALL_FILES:
            try:
                content = tar.extractfile(f).read()
            except KeyError:
                continue
            with open(os.path.join(args.dst, f), "wb") as fh:
                fh.write(content)
    out = {}
    for name, e in index.items():
        o, sizes = e["offset"], e["sizes"]
        if e["kind"] == "q4":
            rows, cols = e["shape"]
            p = np.frombuffer(weights, dtype=np.uint8, count=sizes[0], offset=o).reshape(rows, cols // 2)
            s = np.frombuffer(weights, dtype="<f2", count=sizes[1] // 2, offset=o + sizes[0]).reshape(rows, -1)
            out[name] = ("BF16", e["shape"], to_bf16(dequantize4(p, s, e["group"])))
        else:
            out[name] = ("BF16", e["shape"], weights[o:o + sizes[0]])
    write_safetensors(os.path.join(args.dst, "model.safetensors"), out)
    print(f"unpacked {len(out)} tensors from {len(names)} parts into {args.dst}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--group", type=int, default=32)
    p.add_argument("--min-elements", type=int, default=65536, help="smaller tensors stay bf16")
    p.add_argument("--part-mib", type=int, default=15)
    p.add_argument("--max-mib", type=float, default=60)
    u = sub.add_parser("unpack")
    u.add_argument("src")
    u.add_argument("dst")
    args = ap.parse_args()
    pack(args) if args.cmd == "pack" else unpack(args)


if __name__ == "__main__":
    main()
