#!/usr/bin/env python3
"""Fine-tunes the bundled model (models/default.cmf, its q8_2f weights dequantized exactly) with one LoRA adapter
per domain of the skills demo (docs/SKILLS_DEMO.md), on one GPU, and measures held-out perplexity, backbone against
adapter, per domain. Writes per config and domain a PEFT folder (adapter_config.json, adapter_model.safetensors)
that `cmf skill add --lora` merges, and results.json.

Configs: "mlp4" (gate/up/down projections of layers 4-7, r 32: the merged skills of three domains keep the file
under 40 MB) and "all" (every projection of every layer, r 16: more to train, a bigger merged file). The adapters
are saved float32 (mlp4 about 2.4 MB, all about 3.9 MB per domain). Per config and
domain a small learning-rate sweep; each run trains whole epochs over the domain's 512-token windows and keeps the
epoch of least dev loss. A wall-clock budget stops the sweep early (what finished is kept).

Needs torch, transformers, peft, tokenizers, numpy (the H200 image has them). --smoke: a few steps on the CPU.
"""
import argparse
import json
import math
import os
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cmf_read import CmfFile  # noqa: E402

DOMAINS = ["python", "man", "info"]
SEP = "\n<|endoftext|>\n"
CONFIGS = {
    "mlp4": dict(target_modules=r"model\.layers\.[4-7]\.mlp\.(gate_proj|up_proj|down_proj)", r=32, lora_alpha=32),
    "all": dict(target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], r=16,
                lora_alpha=16),
}


def log(msg):
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


def load_base(cmf_path):
    """The HF config the converter kept, the tokenizer (vocab section) and every backbone tensor, float32."""
    from tokenizers import Tokenizer
    f = CmfFile(cmf_path)
    cfg = f.header["provenance"]["hf_config"]
    state = {n: torch.from_numpy(np.ascontiguousarray(f.tensor(n))) for n in f.names() if not n.startswith("skill.")}
    return cfg, Tokenizer.from_str(f.vocab().decode("utf-8")), state


def build_model(cfg, state, device):
    from transformers import AutoConfig, AutoModelForCausalLM
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(cfg, fh)
    config = AutoConfig.from_pretrained(d)
    config.use_cache = False
    model = AutoModelForCausalLM.from_config(config).to(torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise SystemExit(f"weights do not fit the model: missing {missing}, unexpected {unexpected}")
    if "lm_head.weight" in missing:
        if not config.tie_word_embeddings:
            raise SystemExit("lm_head.weight missing from an untied model")
        if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
            model.lm_head.weight = model.model.embed_tokens.weight   # tied: one parameter
        assert torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    return model.to(device)


def ids_of(tok, path):
    """The documents of a split, each followed by <|endoftext|>, as one id array."""
    eot = tok.token_to_id("<|endoftext|>")
    with open(path, encoding="utf-8") as fh:
        docs = [d for d in fh.read().split(SEP) if d.strip()]
    out = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        out.extend(enc.ids)
        out.append(eot)
    return np.asarray(out, dtype=np.int64)


def windows(ids, n):
    k = len(ids) // n
    return torch.from_numpy(ids[:k * n].reshape(k, n))


@torch.no_grad()
def mean_nll(model, wins, batch, device):
    """Mean next-token NLL over every window (each scored from its second token on)."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(wins), batch):
        x = wins[i:i + batch].to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(input_ids=x).logits.float()
        nll = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1),
                                                reduction="sum")
        total += nll.item()
        count += x[:, 1:].numel()
    return total / max(count, 1)


def train_one(base_model_fn, cfg_name, train_w, dev_w, lr, epochs, batch, device, max_steps, seed):
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
    torch.manual_seed(seed)
    model = get_peft_model(base_model_fn(), LoraConfig(lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                                                       **CONFIGS[cfg_name]))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    steps_per_epoch = max(1, len(train_w) // batch)
    total = steps_per_epoch * epochs if not max_steps else max_steps
    warm = min(20, total // 10 + 1)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, total) / total))))
    best, best_state, curve, step = float("inf"), None, [], 0
    for epoch in range(epochs):
        model.train()
        perm = torch.randperm(len(train_w))
        for i in range(steps_per_epoch):
            x = train_w[perm[i * batch:(i + 1) * batch]].to(device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                loss = model(input_ids=x, labels=x).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            if max_steps and step >= max_steps:
                break
        dev = mean_nll(model, dev_w, 2 * batch, device)
        curve.append(round(dev, 5))
        if dev < best:
            best, best_state = dev, {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}
        if max_steps and step >= max_steps:
            break
    set_peft_model_state_dict(model, best_state)
    return model, best, curve, step


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cmf", default="models/default.cmf")
    ap.add_argument("--data", required=True, help="the folder gather_domains.py wrote")
    ap.add_argument("--out", required=True)
    ap.add_argument("--configs", default="mlp4,all")
    ap.add_argument("--lrs", default="1e-3,3e-3")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--budget-s", type=float, default=330, help="stop starting new runs after this many seconds")
    ap.add_argument("--steps", type=int, default=0, help="stop each run after this many steps (0: whole epochs)")
    ap.add_argument("--eval-windows", type=int, default=0, help="score at most this many dev and test windows (0: all)")
    ap.add_argument("--smoke", action="store_true", help="CPU, 2 steps per run, 8 windows per split")
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    import peft
    import transformers
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}, device {device}"
        + (f" ({torch.cuda.get_device_name()})" if device.type == "cuda" else ""))
    cfg, tok, state = load_base(args.cmf)
    base_fn = lambda: build_model(cfg, state, device)  # noqa: E731
    data = {}
    for d in DOMAINS:
        data[d] = {s: windows(ids_of(tok, os.path.join(args.data, f"{d}.{s}.txt")), args.seq) for s in ("train", "dev", "test")}
        if args.smoke:
            data[d] = {s: w[:8] for s, w in data[d].items()}
        elif args.eval_windows:
            data[d] = {s: w if s == "train" else w[:args.eval_windows] for s, w in data[d].items()}
        log(f"{d}: " + ", ".join(f"{s} {len(w)} windows" for s, w in data[d].items()))
    results = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__},
               "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "seq": args.seq,
               "batch": args.batch, "backbone": {}, "runs": [], "chosen": {}}
    base = base_fn()
    for d in DOMAINS:
        nll = mean_nll(base, data[d]["test"], 2 * args.batch, device)
        results["backbone"][d] = {"test_nll": nll, "test_ppl": math.exp(nll), "test_tokens": int(data[d]["test"][:, 1:].numel()),
                                  "dev_nll": mean_nll(base, data[d]["dev"], 2 * args.batch, device)}
        log(f"backbone {d}: test ppl {math.exp(nll):.3f}")
    del base
    lrs = [float(x) for x in args.lrs.split(",")]
    for c in args.configs.split(","):
        for d in DOMAINS:
            best = None
            for lr in lrs:
                if time.time() - T0 > args.budget_s and best is not None:
                    log(f"budget reached: {c}/{d} lr {lr} skipped")
                    continue
                t = time.time()
                model, dev, curve, steps = train_one(base_fn, c, data[d]["train"], data[d]["dev"], lr, args.epochs,
                                                     args.batch, device, 2 if args.smoke else args.steps, 1234)
                run = {"config": c, "domain": d, "lr": lr, "dev_nll": dev, "dev_curve": curve, "steps": steps,
                       "seconds": round(time.time() - t, 1)}
                results["runs"].append(run)
                log(f"{c}/{d} lr {lr}: dev nll {dev:.4f} (backbone {results['backbone'][d]['dev_nll']:.4f}), curve {curve}, "
                    f"{steps} steps, {run['seconds']} s")
                if best is None or dev < best[1]:
                    best = (model, dev, run)
                else:
                    del model
            model, dev, run = best
            nll = mean_nll(model, data[d]["test"], 2 * args.batch, device)
            folder = os.path.join(args.out, "adapters", c, d)
            model.save_pretrained(folder, safe_serialization=True)
            results["chosen"][f"{c}/{d}"] = {**run, "test_nll": nll, "test_ppl": math.exp(nll),
                                             "backbone_test_ppl": results["backbone"][d]["test_ppl"]}
            log(f"{c}/{d}: chosen lr {run['lr']}, test ppl {math.exp(nll):.3f} vs backbone "
                f"{results['backbone'][d]['test_ppl']:.3f}; saved {folder}")
            del model, best
            with open(os.path.join(args.out, "results.json"), "w") as fh:
                json.dump(results, fh, indent=1)
    results["seconds"] = round(time.time() - T0, 1)
    with open(os.path.join(args.out, "results.json"), "w") as fh:
        json.dump(results, fh, indent=1)
    log("done")


T0 = time.time()
if __name__ == "__main__":
    main()
