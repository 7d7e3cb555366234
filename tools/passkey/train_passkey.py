#!/usr/bin/env python3
"""Fine-tunes a Hugging Face folder written by `cmf export-hf` (the bundled model) on passkey retrieval in the exact
format of `cmf probe-recall` (runtime.PasskeyProbe: a key stated once, filler text, the question), so issue 20's
"passkey accuracy by distance" has a model that can retrieve at all. Every example's loss is on the answer only
(" KEY."); distances are drawn up to --max-distance, one per batch. The folder is rewritten in place (weights and
config, max_position_embeddings raised to --max-positions); `cmf convert` then makes the .cmf. One GPU, about a
minute on an H200. Needs torch, transformers, tokenizers.
"""
import argparse
import json
import os
import random
import time

import torch

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
QUESTION = "\nWhat is the pass key? The pass key is"


def head_text(key):
    return ("There is a pass key hidden in this text; remember it. The pass key is " + key + ". Remember it. " + key
            + " is the pass key.\n")


def example(tok, key, distance, filler, question):
    """The probe's ids for one key (PasskeyProbe.prompt), then the answer; returns (ids, answer_start)."""
    head = tok.encode(head_text(key), add_special_tokens=True).ids
    fill = max(0, distance - len(question))
    ids = head + [filler[i % len(filler)] for i in range(fill)] + question
    answer = tok.encode(" " + key + ".", add_special_tokens=False).ids
    return ids + answer, len(ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("hf", help="folder from cmf export-hf; rewritten in place")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--max-distance", type=int, default=2048)
    ap.add_argument("--max-positions", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM
    t0 = time.time()
    torch.manual_seed(a.seed)
    rnd = random.Random(a.seed)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tok = Tokenizer.from_file(os.path.join(a.hf, "tokenizer.json"))
    filler = tok.encode(FILLER, add_special_tokens=False).ids
    question = tok.encode(QUESTION, add_special_tokens=False).ids
    with open(os.path.join(a.hf, "config.json")) as fh:
        cfg = json.load(fh)
    model = AutoModelForCausalLM.from_pretrained(a.hf, torch_dtype=torch.float32).to(dev)
    model.config.max_position_embeddings = a.max_positions
    model.config.use_cache = False
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * max(0.1, 1 - s / a.steps))
    log = []
    for step in range(a.steps):
        d = rnd.randint(16, a.max_distance)
        rows = [example(tok, str(rnd.randint(10000, 99999)), d, filler, question) for _ in range(a.batch)]
        n = max(len(r[0]) for r in rows)
        x = torch.zeros((a.batch, n), dtype=torch.long)
        y = torch.full((a.batch, n), -100, dtype=torch.long)
        for i, (ids, start) in enumerate(rows):
            x[i, :len(ids)] = torch.tensor(ids)
            y[i, start:len(ids)] = torch.tensor(ids[start:])
        model.train()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            loss = model(input_ids=x.to(dev), labels=y.to(dev)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % 50 == 0 or step == a.steps - 1:
            log.append({"step": step, "distance": d, "loss": round(loss.item(), 4), "s": round(time.time() - t0, 1)})
            print(json.dumps(log[-1]), flush=True)
    model.config.use_cache = True
    model.save_pretrained(a.hf, safe_serialization=True)
    with open(os.path.join(a.hf, "train_passkey.json"), "w") as fh:
        json.dump({"args": vars(a), "log": log, "base_max_positions": cfg.get("max_position_embeddings")}, fh, indent=1)
    print(f"saved {a.hf} in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
