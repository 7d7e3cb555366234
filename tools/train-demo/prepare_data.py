#!/usr/bin/env python3
"""Train the byte-level BPE tokenizer on the corpus and turn the corpus into token ids.

Input:  --corpus DIR [DIR...] each with train.txt / valid.txt from gather_corpus.py (documents separated by a
        line "<|endoftext|>").
Output: --out DIR with
          tokenizer.json      byte-level BPE shaped like Qwen3's (NFC, Qwen's split regex, ByteLevel
                              without its own regex, ByteLevel decoder); special tokens
                              <|endoftext|>, <|im_start|>, <|im_end|> take the last three ids
          train.u16 / valid.u16  little-endian uint16 ids, every document followed by <|endoftext|>
          meta.json           vocab size, special ids, token and byte counts, chat example counts

With --chat-frac F (default 0.03) a small share of ChatML turns is added to the training ids,
made from the corpus itself: "What does `ls` do?" answered by the man page's NAME line and first
DESCRIPTION paragraph, and "What does json.dumps do?" answered by the docstring. This only teaches
the model the turn markers so `cmf chat` gives answers of the right shape; it is not instruction tuning.

Runs on CPU (2 cores: a few minutes for ~100 MB). Needs `tokenizers` and `numpy`.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import time

import numpy as np
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

SEP = "<|endoftext|>"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def read_docs(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return [d.strip("\n") for d in text.split("\n" + SEP + "\n") if d.strip()]


def new_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    return tok


# ----------------------------------------------------------------------------- chat examples

MAN_NAME = re.compile(r"^NAME\n(.+?)\n\n", re.S)
MAN_DESC = re.compile(r"\nDESCRIPTION\n(.+?)(\n\n|$)", re.S)
# "module.func(signature)" on its own line at a paragraph start, then the docstring paragraph
PY_ENTRY = re.compile(r"(?:^|\n\n)([A-Za-z_]\w*(?:\.\w+)+)\(([^\n]*)\)\n((?:.+\n?)+)")


def chatml(user: str, assistant: str) -> str:
    return (f"<|im_start|>user\n{user}<|im_end|>\n"
            f"<|im_start|>assistant\n{assistant}<|im_end|>\n")


def chat_examples(docs: list[str], rng: random.Random) -> list[str]:
    out = []
    for doc in docs:
        m = MAN_NAME.match(doc)
        if m:
            name_line = " ".join(m.group(1).split())
            parts = re.split(r"\s+[-\u2010\u2013\u2014]\s+", name_line, maxsplit=1)
            if len(parts) == 2 and len(parts[0]) < 60:
                cmd = parts[0].split(",")[0].strip()
                answer = f"{cmd} - {parts[1]}."
                d = MAN_DESC.search(doc)
                if d:
                    para = " ".join(d.group(1).split())
                    if 40 <= len(para) <= 1200:
                        answer += " " + para
                q = rng.choice([f"What does `{cmd}` do?", f"What is {cmd}?", f"Explain the {cmd} command.",
                                f"Tell me about {cmd}."])
                out.append(chatml(q, answer))
            continue
        for m in PY_ENTRY.finditer(doc):
            name, doc_text = m.group(1), m.group(3).strip()
            if (name.split(".")[-1].startswith("_") or doc_text.startswith(">>>")
                    or not (40 <= len(doc_text) <= 1500)):
                continue
            if rng.random() < 0.25:
                q = rng.choice([f"What does {name} do?", f"Explain {name} in Python.",
                                f"How do I use {name}?"])
                out.append(chatml(q, f"`{name}({m.group(2)})`: {doc_text}"))
    return out


# ----------------------------------------------------------------------------- main

def encode_docs(tok: Tokenizer, docs: list[str], eos: int) -> np.ndarray:
    chunks = []
    for start in range(0, len(docs), 512):
        for enc in tok.encode_batch(docs[start: start + 512], add_special_tokens=False):
            chunks.append(np.asarray(enc.ids, dtype=np.uint16))
            chunks.append(np.asarray([eos], dtype=np.uint16))
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.uint16)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--corpus", nargs="+", default=[os.path.join(here, "work", "corpus")],
                    help="one or more gather_corpus.py output folders")
    ap.add_argument("--out", default=os.path.join(here, "work", "data"))
    ap.add_argument("--vocab", type=int, default=16384, help="total vocab incl. the 3 special tokens")
    ap.add_argument("--chat-frac", type=float, default=0.03,
                    help="max share of training bytes made of ChatML examples")
    ap.add_argument("--tokenizer-sample-mb", type=float, default=60.0,
                    help="train the BPE on at most this many MB of training text")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    assert args.vocab <= 65536, "ids are stored as uint16"
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    t0 = time.time()

    train_docs = [d for c in args.corpus for d in read_docs(os.path.join(c, "train.txt"))]
    valid_docs = [d for c in args.corpus for d in read_docs(os.path.join(c, "valid.txt"))]
    train_bytes = sum(len(d.encode()) for d in train_docs)
    print(f"docs: train {len(train_docs)} ({train_bytes / 1e6:.1f} MB), valid {len(valid_docs)}", flush=True)

    chats = chat_examples(train_docs, rng)
    rng.shuffle(chats)
    budget = args.chat_frac * train_bytes
    kept, used = [], 0
    for c in chats:
        if used >= budget:
            break
        kept.append(c)
        used += len(c.encode())
    valid_chats = chat_examples(valid_docs, random.Random(args.seed + 1))
    print(f"chat examples: {len(kept)} of {len(chats)} made ({used / 1e6:.2f} MB); valid {len(valid_chats)}",
          flush=True)

    # tokenizer: BPE over a sample of the training documents (stable choice by hash)
    limit = args.tokenizer_sample_mb * 1e6
    sample = [d for d in train_docs if int(hashlib.md5(d[:200].encode()).hexdigest(), 16) % 100
              < max(1, int(100 * min(1.0, limit / max(1, train_bytes))))]
    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab - len(SPECIALS), min_frequency=2,
                                  special_tokens=[], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(sample, trainer=trainer, length=len(sample))
    tok.add_special_tokens(SPECIALS)
    assert tok.get_vocab_size() == args.vocab, tok.get_vocab_size()
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    print(f"tokenizer: vocab {tok.get_vocab_size()}, specials {ids}, trained on {len(sample)} docs "
          f"({time.time() - t0:.0f}s)", flush=True)
    tok.save(os.path.join(args.out, "tokenizer.json"))

    # ChatML examples are mixed in as separate documents, so they land between plain documents
    mixed = train_docs + kept
    rng.shuffle(mixed)
    eos = ids[SEP]
    train_ids = encode_docs(tok, mixed, eos)
    valid_ids = encode_docs(tok, valid_docs, eos)
    valid_chat_ids = encode_docs(tok, valid_chats[:200], eos)
    train_ids.tofile(os.path.join(args.out, "train.u16"))
    valid_ids.tofile(os.path.join(args.out, "valid.u16"))
    valid_chat_ids.tofile(os.path.join(args.out, "valid_chat.u16"))
    valid_bytes = sum(len(d.encode()) for d in valid_docs)
    meta = {
        "vocab_size": tok.get_vocab_size(),
        "special_ids": ids,
        "train_tokens": int(train_ids.size),
        "valid_tokens": int(valid_ids.size),
        "valid_chat_tokens": int(valid_chat_ids.size),
        "train_docs": len(train_docs),
        "valid_docs": len(valid_docs),
        "train_bytes_plain": train_bytes,
        "valid_bytes": valid_bytes,
        "chat_examples": len(kept),
        "chat_bytes": used,
        "bytes_per_token_valid": round(valid_bytes / max(1, valid_ids.size - len(valid_docs)), 3),
        "seconds": round(time.time() - t0, 1),
    }
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
    print(json.dumps(meta, indent=2))
    for text in ("The ls command lists directory contents.", "def parse(self, source):\n    return 42"):
        enc = tok.encode(text)
        print(repr(text), "->", enc.tokens, flush=True)
        assert tok.decode(enc.ids) == text


if __name__ == "__main__":
    main()
