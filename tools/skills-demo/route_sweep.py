#!/usr/bin/env python3
"""Chooses the skills demo's routing subspace (phi layer, rank) on dev prompts: φ of every fit, dev and test prompt
at every layer from one transformers forward each (the bundled model's exact weights), subspaces fitted as
SkillRouter.fit does (unit φ, the last fifth held out, mean + top-r principal directions), accuracy of the least raw
error. Prints dev and test accuracy per (layer, rank). Needs torch and transformers (CPU is enough, ~5 minutes).
Usage: route_sweep.py DATA [CMF]"""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, '..', 'train-demo'))
import train_skills as ts  # noqa: E402
import gather_domains as gd  # noqa: E402

D = sys.argv[1]
cfg, tok, state = ts.load_base(sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, '..', '..', 'models', 'default.cmf'))
model = ts.build_model(cfg, state, torch.device('cpu')).eval()
def phis(lines):
    out = []
    for l in lines:
        ids = torch.tensor([tok.encode(l, add_special_tokens=False).ids])
        with torch.no_grad():
            hs = model(input_ids=ids, output_hidden_states=True).hidden_states
        out.append(np.stack([hs[k + 1][0].mean(0).numpy() for k in range(7)]))   # after layers 0..6
    return np.stack(out)   # n, 7, h
P = {}
for d in ts.DOMAINS:
    fit = [l for l in open(f'{D}/{d}.prompts.fit.txt').read().splitlines() if l.strip()]
    dev_texts = [t for t in open(f'{D}/{d}.dev.txt').read().split(ts.SEP) if t.strip()]
    dev = gd.prompts_of(dev_texts, 60, 'dev')
    test = [l for l in open(f'{D}/{d}.prompts.test.txt').read().splitlines() if l.strip()]
    P[d] = {k: phis(v) for k, v in (('fit', fit), ('dev', dev), ('test', test))}
    print(d, {k: v.shape[0] for k, v in P[d].items()}, flush=True)
def unit(x): return x / np.linalg.norm(x, axis=-1, keepdims=True)
res = []
for layer in range(7):
    for rank in (2, 4, 8, 16, 24):
        subs = {}
        for d in ts.DOMAINS:
            x = unit(P[d]['fit'][:, layer]); n = len(x); hold = max(1, min(n // 5, n - 2)); x = x[:n - hold]
            mu = x.mean(0); u, s, vt = np.linalg.svd(x - mu, full_matrices=False); subs[d] = (mu, vt[:min(rank, len(x) - 1)])
        acc = {}
        for split in ('dev', 'test'):
            ok = tot = 0
            for d in ts.DOMAINS:
                y = unit(P[d][split][:, layer])
                errs = []
                for e in ts.DOMAINS:
                    mu, b = subs[e]; r = y - mu; errs.append((r * r).sum(1) - ((r @ b.T) ** 2).sum(1))
                pred = np.argmin(np.stack(errs, 1), 1)
                ok += (pred == ts.DOMAINS.index(d)).sum(); tot += len(y)
            acc[split] = ok / tot
        res.append((layer, rank, acc['dev'], acc['test'])); print(layer, rank, round(acc['dev'], 3), round(acc['test'], 3), flush=True)
best = max(res, key=lambda r: r[2]); print('best on dev:', best)
