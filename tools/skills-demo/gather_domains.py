#!/usr/bin/env python3
"""Three domains of the offline corpus for the skills demo (docs/SKILLS_DEMO.md): Python docs (stdlib
docstrings and the pydoc reference topics), man pages, GNU info manuals. Reuses the readers of
tools/train-demo/gather_corpus.py, which made the bundled model's corpus, and its held-out rule
(md5(doc id) % 100 < 2), so the held-out Python and man documents are ones the bundled model never saw.
GNU info had no held-out manual there; its held-out part here is 5% of nodes, which the bundled model
did see in pretraining (the skill did not).

Writes OUT/{python,man,info}.{train,dev,test}.txt (documents separated by <|endoftext|>) and
OUT/{domain}.prompts.{fit,test}.txt (one prompt a line: a paragraph snippet of 80-320 characters;
fit from train documents, test from held-out ones). Standard library only; ~5 minutes on 2 cores.
"""
import argparse
import concurrent.futures as cf
import hashlib
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train-demo"))
import gather_corpus as gc  # noqa: E402

SEP = "\n<|endoftext|>\n"


def bucket(key: str) -> int:
    return int(hashlib.md5(key.encode()).hexdigest(), 16) % 100


def split_of(doc_id: str) -> str:
    """The bundled model's held-out rule; 5% of the rest is the dev split that picks the epoch."""
    if bucket(doc_id) < gc.VALID_PERCENT:
        return "test"
    return "dev" if bucket("dev:" + doc_id) < 5 else "train"


def python_docs():
    for doc_id, _, _, text in gc.python_documents(gc.PY_STDLIB_DEFAULT, gc.PY_EXE_DEFAULT):
        yield doc_id, text


def info_nodes():
    """Each manual cut at its node boundaries into ~4 KB pieces; a piece's id is manual/piece-number."""
    for doc_id, _, _, text in gc.info_documents():
        piece, n = [], 0
        for para in text.split("\n\n"):
            piece.append(para)
            if sum(len(p) for p in piece) > 4000:
                yield f"{doc_id}#{n}", "\n\n".join(piece)
                piece, n = [], n + 1
        if piece:
            yield f"{doc_id}#{n}", "\n\n".join(piece)


def info_split(doc_id: str) -> str:
    b = bucket("info:" + doc_id)
    return "test" if b < 5 else "dev" if b < 10 else "train"


def man_docs(train_pages: int, jobs: int):
    regular, _ = gc.man_paths(0)
    held = [p for p in regular if split_of(os.path.relpath(p, gc.MAN_ROOT)) != "train"]
    rest = [p for p in regular if split_of(os.path.relpath(p, gc.MAN_ROOT)) == "train"]
    rest.sort(key=lambda p: hashlib.md5(p.encode()).hexdigest())
    paths = held + rest[:train_pages]
    with cf.ThreadPoolExecutor(jobs) as pool:
        for path, text in zip(paths, pool.map(gc.render_man, paths)):
            if text and len(text) >= 200 and gc.english_enough(text):
                yield os.path.relpath(path, gc.MAN_ROOT), text


PARA = re.compile(r"\n\s*\n")


def prompts_of(texts, n, seed):
    """Up to n snippets, one per document first (stable hash order), 80-320 characters on one line."""
    cands = []
    for i, t in enumerate(texts):
        for j, p in enumerate(PARA.split(t)):
            p = " ".join(p.split())
            if len(p) >= 80 and gc.english_enough(p):
                cands.append((j, hashlib.md5(f"{seed}:{i}:{j}".encode()).hexdigest(), p[:320]))
    cands.sort(key=lambda c: (c[0] > 0, c[1]))   # first paragraphs of documents first
    return [c[2] for c in cands[:n]]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--man-pages", type=int, default=700, help="man pages for training (held-out ones always)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--fit-prompts", type=int, default=40)
    ap.add_argument("--test-prompts", type=int, default=60)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    sources = {"python": (python_docs(), split_of), "info": (info_nodes(), info_split),
               "man": (man_docs(args.man_pages, args.jobs), split_of)}
    for name, (docs, splitter) in sources.items():
        parts = {"train": [], "dev": [], "test": []}
        for doc_id, text in docs:
            parts[splitter(doc_id)].append(text)
        for split, texts in parts.items():
            with open(os.path.join(args.out, f"{name}.{split}.txt"), "w", encoding="utf-8") as f:
                f.write(SEP.join(texts))
        for split, n in (("fit", args.fit_prompts), ("test", args.test_prompts)):
            src = parts["train"] if split == "fit" else parts["test"]
            with open(os.path.join(args.out, f"{name}.prompts.{split}.txt"), "w", encoding="utf-8") as f:
                f.write("\n".join(prompts_of(src, n, split)) + "\n")
        print(name, {k: (len(v), sum(len(t) for t in v)) for k, v in parts.items()}, flush=True)


if __name__ == "__main__":
    main()
