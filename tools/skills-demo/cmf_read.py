"""A minimal CMF v2 reader (numpy): header, vocab section (tokenizer.json) and the tensors of the dtypes the
bundled model uses (f32, f16, bf16, q8_row, q8_2f), dequantized exactly as cmf4j's Dequantizers do (float32,
(q * row_scale) * col_field). CMF_FORMAT.md §1.1-1.3 and §2. Enough for the skills demo to train on the weights
models/default.cmf really runs; `cmf export-hf` is the product's way to do this."""
import json
import struct

import numpy as np

DTYPES = {0: "f32", 1: "f16", 2: "bf16", 3: "q8_row", 9: "q8_2f"}


class CmfFile:
    def __init__(self, path):
        self.buf = np.memmap(path, dtype=np.uint8, mode="r")
        env = bytes(self.buf[:128])
        if env[:4] != b"CMF\x01":
            raise ValueError(f"{path}: not a CMF file")
        version, _, features = struct.unpack_from("<III", env, 4)
        if version != 2:
            raise ValueError(f"{path}: CMF version {version}, expected 2")
        (self.header_off, self.header_len, self.dir_off, self.dir_len, self.data_off, self.data_len,
         _, _, self.vocab_off, self.vocab_len) = struct.unpack_from("<10Q", env, 16)
        self.header = json.loads(bytes(self.buf[self.header_off:self.header_off + self.header_len]))
        d = bytes(self.buf[self.dir_off:self.dir_off + self.dir_len])
        count, pool_off = struct.unpack_from("<QQ", d, 0)
        self.entries = {}
        for i in range(count):
            name_off, name_len, dtype, ndim = struct.unpack_from("<IHBB", d, 16 + 56 * i)
            shape = struct.unpack_from("<6I", d, 16 + 56 * i + 8)[:ndim]
            off, nbytes, _ = struct.unpack_from("<QQQ", d, 16 + 56 * i + 32)
            name = d[pool_off + name_off:pool_off + name_off + name_len].decode("utf-8")
            self.entries[name] = (dtype, tuple(shape), off, nbytes)

    def vocab(self) -> bytes:
        return bytes(self.buf[self.vocab_off:self.vocab_off + self.vocab_len])

    def names(self):
        return list(self.entries)

    def tensor(self, name) -> np.ndarray:
        dtype, shape, off, nbytes = self.entries[name]
        raw = self.buf[self.data_off + off:self.data_off + off + nbytes]
        n = int(np.prod(shape)) if shape else 1
        kind = DTYPES.get(dtype)
        if kind == "f32":
            return raw.view("<f4").reshape(shape).astype(np.float32)
        if kind == "f16":
            return raw.view("<f2").astype(np.float32).reshape(shape)
        if kind == "bf16":
            return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
        rows, cols = int(np.prod(shape[:-1])), shape[-1]
        q = raw[:rows * cols].view(np.int8).reshape(rows, cols).astype(np.float32)
        row = raw[rows * cols:rows * cols + 2 * rows].view("<f2").astype(np.float32)
        out = q * row[:, None]
        if kind == "q8_2f":
            col = raw[rows * cols + 2 * rows:rows * cols + 2 * rows + 2 * cols].view("<f2").astype(np.float32)
            out = out * col[None, :]
        elif kind != "q8_row":
            raise ValueError(f"tensor {name}: dtype id {dtype} is not read by this script")
        assert out.size == n
        return out.reshape(shape)
