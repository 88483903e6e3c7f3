"""docs/llama_stalls.md — `bench/studies/llama_stalls/probe.py NORM OPTIONS_JSON STEPS [WIDTH] [LR] [DATA_DIR]`: train a few steps (the
recipe of cpu.py, 24 blocks, on DATA_DIR/train.npy, default .data/llama_stalls from data.py)
and show per block how much h_t depends on token t (own) and the token-specific share of the hidden states' mean square
(spec: 1 = all tokens different, 0 = one shared vector)."""

import json
import sys

import numpy as np
import torch

from mixbench.layers import NormSpec
from mixbench.models.llama import Llama, LlamaConfig
from mixbench.training.optim import build_optimizer, warmup_cosine

torch.set_num_threads(1)
norm, opt_json, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
width = int(sys.argv[4]) if len(sys.argv) > 4 else 128
lr = float(sys.argv[5]) if len(sys.argv) > 5 else 1e-3
data = sys.argv[6] if len(sys.argv) > 6 else ".data/llama_stalls"
torch.manual_seed(0)
spec = NormSpec.from_dict({"placement": norm, **json.loads(opt_json)})
m = Llama(
    LlamaConfig(
        vocab_size=8192, hidden_size=width, intermediate_size=int(width * 2.6875), num_heads=width // 64, num_layers=24, max_seq_len=64
    ),
    spec,
)
train = torch.from_numpy(np.load(f"{data}/train.npy").astype(np.int64))
g = torch.Generator().manual_seed(1000)


def batch(n):
    idx = torch.randint(0, len(train) - 65, (n,), generator=g)
    x = torch.stack([train[i : i + 65] for i in idx])
    return x[:, :-1], x[:, 1:]


opt = build_optimizer(m, "adam", lr, 0.0, (0.9, 0.999), 1e-8, fused=False)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: warmup_cosine(s, 300, 30, 0.1))


def probe(step):
    x, _ = batch(4)
    t = 56
    cos, sin = m.rope_cos[:64], m.rope_sin[:64]
    alt = x.clone()
    alt[:, t] = (alt[:, t] + 1234) % 8192
    with torch.no_grad():
        h, ha = m.embed_tokens(x), m.embed_tokens(alt)
        out = []
        for i, b in enumerate(m.blocks):
            h, ha = b(h, cos, sin), b(ha, cos, sin)
            if i in (0, 1, 2, 5, 11, 17, 23):
                flat = h.reshape(-1, h.shape[-1])
                spec_frac = 1 - flat.mean(0).pow(2).sum() / flat.pow(2).sum(-1).mean()
                own = ((ha[:, t] - h[:, t]).norm(dim=-1) / h[:, t].norm(dim=-1)).mean()
                out.append(f"b{i + 1}: own {own:.3f} spec {spec_frac:.3f} rms {h.pow(2).mean().sqrt():.2f}")
    print(f"[{norm} {opt_json} lr={lr:g}] step {step}: " + " | ".join(out), flush=True)


probe(0)
for s in range(steps):
    x, y = batch(16)
    loss = m(x, labels=y) / y.numel()
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    if s + 1 in (5, 10, 25, 50, 100):
        print(f"  loss {loss.item():.3f}")
        probe(s + 1)
