"""Lean CPU replica of the LLaMA proxy recipe (Adam, 10 % warm-up, cosine to 10 %, no clipping, fp32) for the stall study
in docs/llama_stalls.md: train loss every --log steps, branch-output RMS and max attention logit of some blocks, and how much
the final hidden state at a position changes when its own token (own) or the token 5 back (ctx5) is replaced.

Data: --data DIR (default .data/llama_stalls) with train.npy / val.npy, int16 token ids of the textmix shard 00001 / the
validation shard in the embedded 8,192-token BPE, documents joined with id 0: made by bench/studies/llama_stalls/data.py.  Example:
    PYTHONPATH=. python bench/studies/llama_stalls/cpu.py --norm hybrid --width 128 --heads 2 --layers 24 --steps 300"""

import argparse
import json
import math
import time

import numpy as np
import torch

from mixbench.layers import NormSpec
from mixbench.layers.attention import project_qkv
from mixbench.models.llama import Llama, LlamaConfig
from mixbench.training.optim import build_optimizer, warmup_cosine

p = argparse.ArgumentParser()
p.add_argument("--norm", default="pre")
p.add_argument("--opt", default="{}")  # json: NormSpec.from_dict extras
p.add_argument("--model", default="{}")  # json LlamaConfig overrides
p.add_argument("--width", type=int, default=128)
p.add_argument("--layers", type=int, default=24)
p.add_argument("--heads", type=int, default=2)
p.add_argument("--lr", type=float, default=1e-3)
p.add_argument("--steps", type=int, default=300)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--seq", type=int, default=64)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--log", type=int, default=25)
p.add_argument("--diag", action="store_true")
p.add_argument("--tag", default="")
p.add_argument("--stop", type=int, default=0)
p.add_argument("--data", default=".data/llama_stalls", help="folder with train.npy and val.npy (bench/studies/llama_stalls/data.py)")
a = p.parse_args()
torch.manual_seed(a.seed)
torch.set_num_threads(1)
spec = NormSpec.from_dict({"placement": a.norm, **json.loads(a.opt)})
cfg = LlamaConfig(
    vocab_size=8192,
    hidden_size=a.width,
    intermediate_size=int(a.width * 2.6875),
    num_heads=a.heads,
    num_layers=a.layers,
    max_seq_len=a.seq,
    **json.loads(a.model),
)
model = Llama(cfg, spec)
train = torch.from_numpy(np.load(f"{a.data}/train.npy").astype(np.int64))
val = torch.from_numpy(np.load(f"{a.data}/val.npy").astype(np.int64))
g = torch.Generator().manual_seed(1000 + a.seed)


def batch(src, n, gen=None):
    idx = torch.randint(0, len(src) - a.seq - 1, (n,), generator=gen)
    x = torch.stack([src[i : i + a.seq + 1] for i in idx])
    return x[:, :-1], x[:, 1:]


vg = torch.Generator().manual_seed(7)
vbatches = [batch(val, 32, vg) for _ in range(4)]


def evaluate():
    model.eval()
    with torch.no_grad():
        tot = sum(model(x, labels=y).item() for x, y in vbatches) / sum(y.numel() for _, y in vbatches)
    model.train()
    return tot


opt = build_optimizer(model, "adam", a.lr, 0.0, (0.9, 0.999), 1e-8, fused=False)
warm = int(round(0.1 * a.steps))
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: warmup_cosine(s, a.steps, warm, 0.1))
hist = []
t0 = time.time()
run = 0.0
k = 0


def stream_rms(x):
    out = []
    cos, sin = model.rope_cos[: x.shape[1]], model.rope_sin[: x.shape[1]]
    h = model.embed_tokens(x)
    out.append(h.pow(2).mean().sqrt().item())
    for b in model.blocks:
        h = b(h, cos, sin)
        out.append(h.pow(2).mean().sqrt().item())
    return out, model.norm(h).pow(2).mean().sqrt().item()


branch = {}


def hook(name):
    def f(mod, inp, out):
        branch[name] = out.detach().pow(2).mean().sqrt().item()

    return f


for i in (0, len(model.blocks) // 2, len(model.blocks) - 1):
    model.blocks[i].attn.proj.register_forward_hook(hook(f"a{i}"))
    model.blocks[i].mlp.fc2.register_forward_hook(hook(f"m{i}"))


def logit_hook(name):
    def f(mod, args):
        with torch.no_grad():
            q, k, _ = project_qkv(mod, args[0][:2])
            branch[name] = (q @ k.transpose(-1, -2)).abs().max().item() / q.shape[-1] ** 0.5

    return f


model.blocks[-1].attn.register_forward_pre_hook(logit_hook("maxlogit23"))
model.blocks[len(model.blocks) // 2].attn.register_forward_pre_hook(logit_hook("maxlogit12"))
for step in range(a.stop or a.steps):
    x, y = batch(train, a.batch, g)
    loss = model(x, labels=y) / y.numel()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if a.diag and step in (0, 1, 5, 20, 50, 100, 200):
        gn = [math.sqrt(sum(p.grad.pow(2).sum().item() for p in b.parameters() if p.grad is not None)) for b in model.blocks]
        with torch.no_grad():
            rms, fin = stream_rms(x[:4])
        print(
            f"  diag step {step}: grad/block first,mid,last {gn[0]:.2e} {gn[len(gn) // 2]:.2e} {gn[-1]:.2e} "
            f"emb {model.embed.weight.grad.norm():.2e} head {model.head.weight.grad.norm():.2e}; "
            f"stream rms emb {rms[0]:.3f} b1 {rms[1]:.3f} mid {rms[len(rms) // 2]:.3f} last {rms[-1]:.3f} final {fin:.3f}",
            flush=True,
        )
    opt.step()
    sched.step()
    run += loss.item()
    k += 1
    if (step + 1) % a.log == 0:
        with torch.no_grad():
            xs = x[:4]
            h0 = model.forward_hidden(xs)
            t_ = xs.shape[1] - 8
            sens = []
            for sh in (0, 5):
                alt = xs.clone()
                alt[:, t_ - sh] = (alt[:, t_ - sh] + 1234) % 8192
                sens.append(((model.forward_hidden(alt)[:, t_] - h0[:, t_]).norm(dim=-1) / h0[:, t_].norm(dim=-1)).mean().item())
        branch["own"], branch["ctx5"] = sens
        hist.append((step + 1, run / k))
        print(
            f"{a.tag} step {step + 1} loss {run / k:.3f} ({time.time() - t0:.0f}s) branch rms "
            + " ".join(f"{k_}={v_:.2f}" for k_, v_ in branch.items()),
            flush=True,
        )
        run = 0.0
        k = 0
v = evaluate()
print(
    json.dumps({"tag": a.tag, "norm": spec.label(), "lr": a.lr, "val_loss": round(v, 4), "train": [round(loss_, 3) for _, loss_ in hist]}),
    flush=True,
)
