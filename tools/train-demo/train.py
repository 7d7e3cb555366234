#!/usr/bin/env python3
"""Train the bundled demo model: a small Qwen3 (Qwen3ForCausalLM) language model, from scratch.

Input:  --data DIR from prepare_data.py: tokenizer.json, train.u16[.xz], valid.u16[.xz],
        valid_chat.u16[.xz], meta.json.
Output: --out DIR, a Hugging Face folder (config.json, generation_config.json, model.safetensors in
        bfloat16, tokenizer.json, tokenizer_config.json with a ChatML chat_template) plus
        train_log.json (loss curve, held-out perplexity, throughput) and check.json (greedy
        continuations of a few prompts, for comparing other runtimes against transformers).

With --tokenizer FILE --corpus DIR it tokenizes gather_corpus.py's train.txt / valid.txt (or .xz) itself
with an existing tokenizer.json (e.g. the bundled model's, from `cmf export-hf`), so a model of that
vocabulary can be trained where prepare_data.py's tokenizer training is not wanted.

With --mtp it also trains a multi-token-prediction head (DeepSeek-V3 / Qwen3-Next style) jointly, on an
auxiliary next-next-token loss: from the last layer's output h_i (before the final norm) and the token
at i+1, x = fc([enorm(embed(t_{i+1})); hnorm(h_i)]) goes through one more Qwen3 decoder layer, a norm
and the shared head to predict the token at i+2. It is saved in the same model.safetensors under
Qwen3-Next's names (mtp.fc.weight, mtp.pre_fc_norm_embedding.weight, mtp.pre_fc_norm_hidden.weight,
mtp.layers.0.*, mtp.norm.weight) with "mtp_num_hidden_layers": 1 in config.json; `cmf convert` maps
them to model.mtp.* and `cmf run --draft mtp` drafts with it. check.json then also records how often
the head's greedy guess equals the model's next-next greedy token on held-out text.

Training runs for a wall-clock budget (--minutes), not a step count: after a short calibration the
script measures its step time and fixes the total number of steps so that the cosine schedule ends
on time. bf16 autocast, fused AdamW, torch.compile (falls back to eager if compiling fails).

  python3 train.py --data work/data --out work/hf --minutes 7      # one H200
  python3 train.py --data /tmp/dtest --out /tmp/hf --smoke         # CPU, seconds, tiny config
  python3 train.py --tokenizer tok/tokenizer.json --corpus work/corpus --mtp --out /tmp/hf --minutes 6
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
from torch import nn
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM
from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer, Qwen3RMSNorm

SEP = "<|endoftext|>"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

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


def read_docs(path: str) -> list[str]:
    """gather_corpus.py's documents (separated by a line <|endoftext|>), from PATH or PATH.xz."""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            text = f.read()
    else:
        with lzma.open(path + ".xz", "rt", encoding="utf-8") as f:
            text = f.read()
    return [d.strip("\n") for d in text.split("\n" + SEP + "\n") if d.strip()]


def tokenize_corpus(tokenizer_file: str, corpus: str):
    """Ids of the corpus with an existing tokenizer (every document followed by <|endoftext|>), and meta.json's fields."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer_file)
    special = {s: tok.token_to_id(s) for s in SPECIALS}
    missing = [s for s, i in special.items() if i is None]
    if missing:
        raise SystemExit(f"{tokenizer_file} has no {missing}: the chat format and end of text need them")
    V = tok.get_vocab_size()
    if V > 65536:
        raise SystemExit(f"vocab {V} does not fit uint16 ids")

    def encode(docs):
        out = []
        for start in range(0, len(docs), 512):
            for enc in tok.encode_batch(docs[start: start + 512], add_special_tokens=False):
                out.append(np.asarray(enc.ids, dtype=np.uint16))
                out.append(np.asarray([special[SEP]], dtype=np.uint16))
        return np.concatenate(out) if out else np.zeros(0, dtype=np.uint16)

    t0 = time.time()
    train_docs = read_docs(os.path.join(corpus, "train.txt"))
    valid_docs = read_docs(os.path.join(corpus, "valid.txt"))
    train_ids, valid_ids = encode(train_docs), encode(valid_docs)
    meta = {"vocab_size": V, "special_ids": special, "valid_bytes": sum(len(d.encode()) for d in valid_docs)}
    print(f"tokenized {len(train_docs)} + {len(valid_docs)} documents with {tokenizer_file} (vocab {V}): "
          f"{train_ids.size:,} + {valid_ids.size:,} tokens in {time.time() - t0:.0f}s", flush=True)
    return meta, train_ids, valid_ids, np.zeros(0, dtype=np.uint16)


class MtpHead(nn.Module):
    """One MTP layer (Qwen3-Next's names): x = fc([enorm(e); hnorm(h)]) -> a decoder layer -> norm."""

    def __init__(self, config: Qwen3Config):
        super().__init__()
        h = config.hidden_size
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.pre_fc_norm_embedding = Qwen3RMSNorm(h, eps=config.rms_norm_eps)
        self.pre_fc_norm_hidden = Qwen3RMSNorm(h, eps=config.rms_norm_eps)
        self.layers = nn.ModuleList([Qwen3DecoderLayer(config, layer_idx=0)])
        self.norm = Qwen3RMSNorm(h, eps=config.rms_norm_eps)

    def forward(self, embedded, hidden, position_embeddings, position_ids):
        """The layer's output (before the norm) from the embedded next tokens and the model's hidden rows."""
        x = self.fc(torch.cat([self.pre_fc_norm_embedding(embedded), self.pre_fc_norm_hidden(hidden)], dim=-1))
        out = self.layers[0](x, attention_mask=None, position_ids=position_ids, position_embeddings=position_embeddings)
        return out[0] if isinstance(out, tuple) else out   # causal: sdpa with no mask


class WithMtp(nn.Module):
    """The model and its MTP head trained together: loss = next-token CE + weight * next-next-token CE."""

    def __init__(self, lm: Qwen3ForCausalLM, head: MtpHead, weight: float):
        super().__init__()
        self.lm, self.head, self.weight = lm, head, weight
        self.final_norm = lm.model.norm
        lm.model.norm = nn.Identity()   # the trunk hands back its last layer's output; the norm is applied here

    def restore(self):
        self.lm.model.norm = self.final_norm

    def losses(self, x, y):
        h = self.lm.model(input_ids=x, use_cache=False).last_hidden_state
        logits = self.lm.lm_head(self.final_norm(h))
        main = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))
        # row i: h_i and the token at i+1 (y_i) predict the token at i+2 (y_{i+1}); positions 0..T-2
        t = x.size(1) - 1
        pos = torch.arange(t, device=x.device)[None, :].expand(x.size(0), t)
        e = self.lm.model.embed_tokens(y[:, :-1])
        pe = self.lm.model.rotary_emb(e, pos)
        z = self.head(e, h[:, :-1], pe, pos)
        logits2 = self.lm.lm_head(self.head.norm(z))
        mtp = F.cross_entropy(logits2.float().view(-1, logits2.size(-1)), y[:, 1:].reshape(-1))
        return main, mtp

    def forward(self, x, y):
        main, mtp = self.losses(x, y)
        return main + self.weight * mtp, main.detach(), mtp.detach()


def save_mtp(head: MtpHead, out: str):
    """Adds the head to out/model.safetensors (bf16) under Qwen3-Next's names and its layer count to config.json."""
    from safetensors.torch import load_file, save_file
    path = os.path.join(out, "model.safetensors")
    tensors = load_file(path)
    for k, v in head.state_dict().items():
        tensors["mtp." + k] = v.detach().to(torch.bfloat16).contiguous().cpu()
    save_file(tensors, path, metadata={"format": "pt"})
    cfg_path = os.path.join(out, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["mtp_num_hidden_layers"] = 1
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2)


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
    ap.add_argument("--data", help="prepare_data.py's output folder (or --tokenizer with --corpus)")
    ap.add_argument("--tokenizer", help="an existing tokenizer.json: tokenize --corpus with it instead of reading --data")
    ap.add_argument("--corpus", help="gather_corpus.py's folder (train.txt, valid.txt, or .xz), with --tokenizer")
    ap.add_argument("--mtp", action="store_true", help="train an MTP head jointly (auxiliary next-next-token loss)")
    ap.add_argument("--mtp-weight", type=float, default=0.3, help="weight of the MTP loss (DeepSeek-V3: 0.3, then 0.1)")
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
    if (args.tokenizer is None) != (args.corpus is None) or (args.data is None) == (args.tokenizer is None):
        ap.error("give --data, or --tokenizer with --corpus")
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
    if args.tokenizer:
        meta, train_np, valid_np, chat_np = tokenize_corpus(args.tokenizer, args.corpus)
        tokenizer_json = args.tokenizer
    else:
        with open(os.path.join(args.data, "meta.json")) as f:
            meta = json.load(f)
        train_np = load_ids(args.data, "train.u16")
        valid_np = load_ids(args.data, "valid.u16")
        chat_np = load_ids(args.data, "valid_chat.u16")
        tokenizer_json = os.path.join(args.data, "tokenizer.json")
    V, special = meta["vocab_size"], meta["special_ids"]
    eos_id, im_start, im_end = special["<|endoftext|>"], special["<|im_start|>"], special["<|im_end|>"]
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
    joint = None
    if args.mtp:
        head = MtpHead(model.config).to(dev)   # the model's config object: its attention implementation (sdpa)
        joint = WithMtp(model, head, args.mtp_weight)
        check_causal(joint, V, dev)
        print(f"MTP head: {sum(p.numel() for p in head.parameters()):,} params, loss weight {args.mtp_weight}", flush=True)

    decay, no_decay = [], []
    for name, p in (joint if joint is not None else model).named_parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=(dev == "cuda"))

    mtp_acc, mtp_n = torch.zeros((), device=dev), 0

    def loss_of(m, x, y):
        nonlocal mtp_acc, mtp_n
        if joint is not None:   # m is the joint module (or its compiled form)
            total, _, mtp = m(x, y)
            mtp_acc += mtp
            mtp_n += 1
            return total
        logits = m(input_ids=x, use_cache=False).logits
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))

    train_module = joint if joint is not None else model
    step_fn = loss_of
    compiled = False
    if not args.no_compile and dev == "cuda":
        try:
            cmodel = torch.compile(train_module)
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
        train_module.eval()
        total, count = 0.0, 0
        for x, y in windows(ids, limit):
            with torch.autocast(dev, dtype=torch.bfloat16, enabled=(dev == "cuda")):
                if joint is not None:
                    h = model.model(input_ids=x, use_cache=False).last_hidden_state
                    logits = model.lm_head(joint.final_norm(h))
                else:
                    logits = model(input_ids=x, use_cache=False).logits
            total += F.cross_entropy(logits.float().view(-1, V), y.reshape(-1), reduction="sum").item()
            count += y.numel()
        train_module.train()
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
                loss = step_fn(train_module, x, y)
            except Exception as e:
                if not compiled:
                    raise
                print(f"compiled step failed ({type(e).__name__}: {str(e)[:300]}); continuing eagerly", flush=True)
                step_fn, compiled = loss_of, False
                loss = step_fn(train_module, x, y)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(train_module.parameters(), 1.0)
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
            mtp_avg = None
            if mtp_n:
                mtp_avg = (mtp_acc / mtp_n).item()
                mtp_acc.zero_()
                mtp_n = 0
            elapsed = time.time() - t_loop
            curve.append({"step": step, "tokens": step * tokens_per_step, "loss": round(avg, 4),
                          "lr": lr, "grad_norm": round(float(gnorm), 3), "elapsed_s": round(elapsed, 1)}
                         | ({} if mtp_avg is None else {"mtp_loss": round(mtp_avg, 4)}))
            print(f"step {step:5d}/{total_steps if total_steps < 10 ** 9 else '?'}  loss {avg:.4f}  "
                  f"{'' if mtp_avg is None else f'(mtp {mtp_avg:.4f})  '}lr {lr:.2e}  "
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

    mtp_check = None
    if joint is not None:
        mtp_check = mtp_agreement(joint, valid, args.seq, dev)
        print(f"MTP head on held-out text: next-next-token loss {mtp_check['mtp_loss']:.4f}; its greedy guess equals "
              f"the model's greedy next-next token {100 * mtp_check['agrees_with_model']:.1f}% of the time "
              f"(the text's {100 * mtp_check['agrees_with_text']:.1f}%)", flush=True)
        joint.restore()

    # ---- save the HF folder
    out = args.out
    os.makedirs(out, exist_ok=True)
    model.to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.save_pretrained(out, safe_serialization=True)
    if joint is not None:
        save_mtp(joint.head, out)
    gen_cfg = GenerationConfig(bos_token_id=eos_id, eos_token_id=[im_end, eos_id], pad_token_id=eos_id,
                               do_sample=True, temperature=0.8, top_k=50, top_p=0.95,
                               repetition_penalty=1.1)
    gen_cfg.save_pretrained(out)
    shutil.copy(tokenizer_json, os.path.join(out, "tokenizer.json"))
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
        json.dump({"prompts": checks, "chat": {"prompt": chat_prompt, "greedy_text": chat_answer},
                   "mtp": mtp_check}, f, indent=1)

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
        "mtp": mtp_check, "curve": curve, "evals": evals,
        "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
        "torch": torch.__version__, "wall_seconds": round(time.time() - t_begin, 1),
    }
    with open(os.path.join(out, "train_log.json"), "w") as f:
        json.dump(log, f, indent=1)
    print(json.dumps({k: v for k, v in log.items() if k not in ("curve", "evals")}, indent=1), flush=True)


@torch.no_grad()
def check_causal(joint: WithMtp, vocab: int, dev: str):
    """The head's layer must attend causally (it runs with no mask): a change at the last position leaves the rest."""
    x = torch.randint(0, vocab, (1, 16), device=dev)
    y = torch.randint(0, vocab, (1, 16), device=dev)
    h = joint.lm.model(input_ids=x, use_cache=False).last_hidden_state
    pos = torch.arange(15, device=dev)[None, :]
    e = joint.lm.model.embed_tokens(y[:, :-1])
    a = joint.head(e, h[:, :-1], joint.lm.model.rotary_emb(e, pos), pos)
    e2 = e.clone()
    e2[:, -1] += 1.0
    b = joint.head(e2, h[:, :-1], joint.lm.model.rotary_emb(e2, pos), pos)
    if not torch.allclose(a[:, :-1], b[:, :-1], atol=1e-5) or torch.allclose(a[:, -1], b[:, -1]):
        raise SystemExit("the MTP layer does not attend causally with this transformers version's attention")


@torch.no_grad()
def mtp_agreement(joint: WithMtp, ids: torch.Tensor, seq: int, dev: str, windows: int = 64) -> dict:
    """On held-out windows: the head's loss, and how often its greedy pick at row i equals the model's greedy pick at
    i+1 given the true tokens (what greedy drafting of one token would have had accepted) and the text's token."""
    joint.eval()
    n = min(windows, (ids.numel() - 1) // seq)
    agree_model = agree_text = count = 0
    loss_sum = 0.0
    for s in range(0, n, 16):
        idx = torch.arange(s, min(n, s + 16), device=dev)[:, None] * seq + torch.arange(seq + 1, device=dev)
        w = ids[idx]
        x, y = w[:, :-1], w[:, 1:]
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=(dev == "cuda")):
            h = joint.lm.model(input_ids=x, use_cache=False).last_hidden_state
            logits = joint.lm.lm_head(joint.final_norm(h))
            t = x.size(1) - 1
            pos = torch.arange(t, device=dev)[None, :].expand(x.size(0), t)
            e = joint.lm.model.embed_tokens(y[:, :-1])
            z = joint.head(e, h[:, :-1], joint.lm.model.rotary_emb(e, pos), pos)
            logits2 = joint.lm.lm_head(joint.head.norm(z))
        guess = logits2.argmax(-1)                 # row i: the head's pick for the token at i+2
        model_next = logits.argmax(-1)[:, 1:]      # the model's pick at i+1 for the token at i+2
        agree_model += (guess == model_next).sum().item()
        agree_text += (guess == y[:, 1:]).sum().item()
        count += guess.numel()
        loss_sum += F.cross_entropy(logits2.float().reshape(-1, logits2.size(-1)), y[:, 1:].reshape(-1),
                                    reduction="sum").item()
    joint.train()
    return {"windows": n, "rows": count, "mtp_loss": round(loss_sum / max(1, count), 4),
            "agrees_with_model": round(agree_model / max(1, count), 4),
            "agrees_with_text": round(agree_text / max(1, count), 4)}


if __name__ == "__main__":
    main()
