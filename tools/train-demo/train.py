#!/usr/bin/env python3
"""Train the bundled demo model: a small Qwen3 (Qwen3ForCausalLM) language model, from scratch.

Input:  --data DIR from prepare_data.py: tokenizer.json, train.u16[.xz], valid.u16[.xz],
        valid_chat.u16[.xz], meta.json.
Output: --out DIR, a Hugging Face folder (config.json, generation_config.json, model.safetensors in
        bfloat16, tokenizer.json, tokenizer_config.json with a ChatML chat_template) plus
        train_log.json (loss curve, held-out perplexity, throughput) and check.json (greedy
        continuations of a few prompts, for comparing other runtimes against transformers).

Training runs for a wall-clock budget (--minutes), not a step count: after a short calibration the
script measures its step time and fixes the total number of steps so that the cosine schedule ends
on time. bf16 autocast, fused AdamW, torch.compile (falls back to eager if compiling fails).

  python3 train.py --data work/data --out work/hf --minutes 7      # one H200
  python3 train.py --data /tmp/dtest --out /tmp/hf --smoke         # CPU, seconds, tiny config
"""
from __future__ import annotations

import argparse
import json
import lzma
import math
import os
import shutil
import time

import numpy as np
import torch
import torch.nn.functional as F
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def load_ids(data_dir: str, name: str) -> np.ndarray:
    path = os.path.join(data_dir, name)
    if os.path.exists(path):
        return np.fromfile(path, dtype="<u2")
    with lzma.open(path + ".xz", "rb") as f:
        return np.frombuffer(f.read(), dtype="<u2")


def tokenizer_config(vocab_size: int, special_ids: dict[str, int]) -> dict:
    decoder = {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                        "single_word": False, "special": True}
               for s, i in sorted(special_ids.items(), key=lambda kv: kv[1])}
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|endoftext|>",
        "errors": "replace",
        "model_max_length": 1024,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=7.0, help="wall-clock budget of the training loop")
    ap.add_argument("--max-steps", type=int, default=0, help="cap on steps (0: set by the budget)")
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--intermediate", type=int, default=1152)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--max-positions", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=128, help="sequences per step")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--evals", type=int, default=12, help="quick held-out evals during training")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--smoke", action="store_true", help="tiny config, few steps, for a CPU check")
    args = ap.parse_args()
    if args.smoke:
        args.hidden, args.layers, args.heads, args.kv_heads, args.head_dim = 64, 2, 4, 2, 16
        args.intermediate, args.seq, args.batch, args.warmup = 128, 64, 8, 5
        args.max_steps = args.max_steps or 30
        args.minutes = min(args.minutes, 1.0)

    t_begin = time.time()
    torch.manual_seed(args.seed)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    with open(os.path.join(args.data, "meta.json")) as f:
        meta = json.load(f)
    V, special = meta["vocab_size"], meta["special_ids"]
    eos_id, im_start, im_end = special["<|endoftext|>"], special["<|im_start|>"], special["<|im_end|>"]

    train_np = load_ids(args.data, "train.u16")
    valid_np = load_ids(args.data, "valid.u16")
    chat_np = load_ids(args.data, "valid_chat.u16")
    train = torch.from_numpy(train_np.astype(np.int64)).to(dev)
    valid = torch.from_numpy(valid_np.astype(np.int64)).to(dev)
    valid_chat = torch.from_numpy(chat_np.astype(np.int64)).to(dev)
    print(f"device {dev} ({torch.cuda.get_device_name() if dev == 'cuda' else 'cpu'}), torch {torch.__version__}; "
          f"train {train.numel():,} tokens, valid {valid.numel():,}, valid_chat {valid_chat.numel():,}", flush=True)

    config = Qwen3Config(
        vocab_size=V, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim, hidden_act="silu", max_position_embeddings=args.max_positions,
        rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
        bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id, use_cache=True,
    )
    model = Qwen3ForCausalLM(config)
    model.config._attn_implementation = "sdpa"
    model.to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    n_embed = model.model.embed_tokens.weight.numel()
    print(f"model: {n_params:,} params ({n_params - n_embed:,} non-embedding), tied embeddings", flush=True)

    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=(dev == "cuda"))

    def loss_of(m, x, y):
        logits = m(input_ids=x, use_cache=False).logits
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))

    step_fn = loss_of
    compiled = False
    if not args.no_compile and dev == "cuda":
        try:
            cmodel = torch.compile(model)
            step_fn = lambda m, x, y: loss_of(cmodel, x, y)  # noqa: E731
            compiled = True
        except Exception as e:  # compile set-up failed: train eagerly
            print(f"torch.compile unavailable ({e}); eager", flush=True)

    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    offsets_arange = torch.arange(args.seq + 1, device=dev)

    def batch():
        starts = torch.randint(0, train.numel() - args.seq - 1, (args.batch,), device=dev, generator=gen)
        w = train[starts[:, None] + offsets_arange]
        return w[:, :-1], w[:, 1:]

    def windows(ids: torch.Tensor, limit: int | None = None):
        n = (ids.numel() - 1) // args.seq
        if limit is not None:
            n = min(n, limit)
        for s in range(0, n, 64):
            idx = torch.arange(s, min(n, s + 64), device=dev)[:, None] * args.seq + offsets_arange
            w = ids[idx]
            yield w[:, :-1], w[:, 1:]

    @torch.no_grad()
    def evaluate(ids: torch.Tensor, limit: int | None = None) -> tuple[float, int]:
        model.eval()
        total, count = 0.0, 0
        for x, y in windows(ids, limit):
            with torch.autocast(dev, dtype=torch.bfloat16, enabled=(dev == "cuda")):
                logits = model(input_ids=x, use_cache=False).logits
            total += F.cross_entropy(logits.float().view(-1, V), y.reshape(-1), reduction="sum").item()
            count += y.numel()
        model.train()
        return total / max(1, count), count

    def lr_at(step: int, total: int) -> float:
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        progress = min(1.0, (step - args.warmup) / max(1, total - args.warmup))
        floor = args.lr * args.min_lr_frac
        return floor + (args.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    budget_s = args.minutes * 60
    total_steps = args.max_steps or 10 ** 9
    calib_from, calib_to = 10, 40
    curve, evals = [], []
    tokens_per_step = args.batch * args.seq
    model.train()
    t_loop = time.time()
    t_calib = None
    step = 0
    loss_acc, loss_n = torch.zeros((), device=dev), 0
    eval_every = None
    while step < total_steps:
        lr = lr_at(step, total_steps if total_steps < 10 ** 9 else 10 ** 6)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch()
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=(dev == "cuda")):
            try:
                loss = step_fn(model, x, y)
            except Exception as e:
                if not compiled:
                    raise
                print(f"compiled step failed ({type(e).__name__}: {str(e)[:300]}); continuing eagerly", flush=True)
                step_fn, compiled = loss_of, False
                loss = step_fn(model, x, y)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_acc += loss.detach()
        loss_n += 1
        step += 1

        if step == calib_from:
            if dev == "cuda":
                torch.cuda.synchronize()
            t_calib = time.time()
            print(f"step {step}: first steps (incl. compile) took {t_calib - t_loop:.1f}s", flush=True)
        if step == calib_to:
            if dev == "cuda":
                torch.cuda.synchronize()
            per_step = (time.time() - t_calib) / (calib_to - calib_from)
            # leave room for the quick evals (~1% each) and the tail
            remaining = budget_s - (time.time() - t_loop)
            if not args.max_steps:
                total_steps = calib_to + max(0, int(remaining / per_step * 0.96))
            print(f"calibrated: {per_step * 1000:.1f} ms/step, {tokens_per_step / per_step:,.0f} tok/s "
                  f"-> {total_steps} steps ({total_steps * tokens_per_step / 1e6:.0f}M tokens)", flush=True)
        if total_steps < 10 ** 9 and eval_every is None:
            eval_every = max(1, total_steps // args.evals)

        log_every = 25 if not args.smoke else 5
        if step % log_every == 0 or step == total_steps:
            avg = (loss_acc / loss_n).item()
            loss_acc.zero_()
            loss_n = 0
            elapsed = time.time() - t_loop
            curve.append({"step": step, "tokens": step * tokens_per_step, "loss": round(avg, 4),
                          "lr": lr, "grad_norm": round(float(gnorm), 3), "elapsed_s": round(elapsed, 1)})
            print(f"step {step:5d}/{total_steps if total_steps < 10 ** 9 else '?'}  loss {avg:.4f}  lr {lr:.2e}  "
                  f"gnorm {float(gnorm):.2f}  {step * tokens_per_step / elapsed:,.0f} tok/s  {elapsed:.0f}s",
                  flush=True)
        if eval_every and (step % eval_every == 0 or step == total_steps):
            vl, _ = evaluate(valid, limit=128)
            evals.append({"step": step, "tokens": step * tokens_per_step, "valid_loss": round(vl, 4),
                          "valid_ppl": round(math.exp(vl), 2), "elapsed_s": round(time.time() - t_loop, 1)})
            print(f"  eval @ {step}: valid loss {vl:.4f}  ppl {math.exp(vl):.2f}", flush=True)
        if time.time() - t_loop > budget_s + 45:
            print(f"stopping at step {step}: over budget", flush=True)
            break
    if dev == "cuda":
        torch.cuda.synchronize()
    train_s = time.time() - t_loop

    valid_loss, valid_count = evaluate(valid)
    chat_loss, chat_count = evaluate(valid_chat) if valid_chat.numel() > args.seq + 1 else (float("nan"), 0)
    valid_bytes = meta["valid_bytes"]
    # bits per byte over the scored windows, scaled by the share of the valid set they cover
    bpb = valid_loss * valid_count / math.log(2) / (valid_bytes * valid_count / max(1, valid.numel()))
    print(f"held-out: loss {valid_loss:.4f}, perplexity {math.exp(valid_loss):.2f} over {valid_count:,} tokens, "
          f"{bpb:.3f} bits/byte; chat-format held-out loss {chat_loss:.4f}", flush=True)

    # ---- save the HF folder
    out = args.out
    os.makedirs(out, exist_ok=True)
    model.to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.save_pretrained(out, safe_serialization=True)
    gen_cfg = GenerationConfig(bos_token_id=eos_id, eos_token_id=[im_end, eos_id], pad_token_id=eos_id,
                               do_sample=True, temperature=0.8, top_k=50, top_p=0.95,
                               repetition_penalty=1.1)
    gen_cfg.save_pretrained(out)
    shutil.copy(os.path.join(args.data, "tokenizer.json"), os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(V, special), f, indent=2, ensure_ascii=False)

    # ---- reload through transformers, as a user would, and record continuations
    tok = PreTrainedTokenizerFast.from_pretrained(out)
    reloaded = Qwen3ForCausalLM.from_pretrained(out, dtype=torch.float32).to(dev).eval()
    prompts = ["The", "The ls command", "To install a package,", "This module provides"]
    checks = []
    for p in prompts:
        ids = tok(p, return_tensors="pt").input_ids.to(dev)
        with torch.no_grad():
            g = reloaded.generate(ids, max_new_tokens=40, do_sample=False, repetition_penalty=1.0,
                                  eos_token_id=[im_end, eos_id], pad_token_id=eos_id)
            torch.manual_seed(0)
            s = reloaded.generate(ids, max_new_tokens=60, do_sample=True, temperature=0.8, top_k=50,
                                  top_p=0.95, repetition_penalty=1.1, eos_token_id=[im_end, eos_id],
                                  pad_token_id=eos_id)
            logits = reloaded(ids).logits[0, -1].float()
        top = torch.topk(logits, 5)
        item = {"prompt": p, "prompt_ids": ids[0].tolist(), "greedy_ids": g[0, ids.shape[1]:].tolist(),
                "greedy_text": tok.decode(g[0, ids.shape[1]:]), "sampled_text": tok.decode(s[0, ids.shape[1]:]),
                "last_logits_top5_ids": top.indices.tolist(),
                "last_logits_top5": [round(v, 4) for v in top.values.tolist()]}
        checks.append(item)
        print(f"--- {p!r}\n  greedy : {item['greedy_text']!r}\n  sampled: {item['sampled_text']!r}", flush=True)
    chat_prompt = tok.apply_chat_template([{"role": "user", "content": "What does `grep` do?"}],
                                          tokenize=False, add_generation_prompt=True)
    ids = tok(chat_prompt, return_tensors="pt").input_ids.to(dev)
    with torch.no_grad():
        g = reloaded.generate(ids, max_new_tokens=60, do_sample=False, eos_token_id=[im_end, eos_id],
                              pad_token_id=eos_id)
    chat_answer = tok.decode(g[0, ids.shape[1]:])
    print(f"--- chat {chat_prompt!r}\n  greedy : {chat_answer!r}", flush=True)
    with open(os.path.join(out, "check.json"), "w") as f:
        json.dump({"prompts": checks, "chat": {"prompt": chat_prompt, "greedy_text": chat_answer}}, f, indent=1)

    log = {
        "config": {k: getattr(args, k) for k in ("hidden", "layers", "heads", "kv_heads", "head_dim",
                                                 "intermediate", "seq", "batch", "lr", "min_lr_frac",
                                                 "warmup", "weight_decay", "seed")},
        "params": n_params, "non_embedding_params": n_params - n_embed, "vocab_size": V,
        "steps": step, "tokens_seen": step * tokens_per_step, "train_tokens_available": int(train.numel()),
        "epochs": round(step * tokens_per_step / train.numel(), 2),
        "train_seconds": round(train_s, 1), "tokens_per_s": round(step * tokens_per_step / train_s),
        "compiled": compiled, "final_train_loss": curve[-1]["loss"] if curve else None,
        "valid_loss": round(valid_loss, 4), "valid_ppl": round(math.exp(valid_loss), 2),
        "valid_tokens_scored": valid_count, "valid_bits_per_byte": round(bpb, 4),
        "valid_chat_loss": None if math.isnan(chat_loss) else round(chat_loss, 4),
        "curve": curve, "evals": evals,
        "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
        "torch": torch.__version__, "wall_seconds": round(time.time() - t_begin, 1),
    }
    with open(os.path.join(out, "train_log.json"), "w") as f:
        json.dump(log, f, indent=1)
    print(json.dumps({k: v for k, v in log.items() if k not in ("curve", "evals")}, indent=1), flush=True)


if __name__ == "__main__":
    main()
