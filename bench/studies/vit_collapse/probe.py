"""Lean CPU replica of the first steps of the placements grid's ViT block, for the output-norm collapse
(results/proxy/vit_output_norms/README.md; findings in docs/vit_collapse_probe.md).

The config is composed by mixbench (task=in1k_vit_tiny scale=proxy data=cifar10_proxy model.patch_size=4
trainer.max_epochs=30 optim.warmup_epochs=3 ema.decay=0.999, plus ``--norm`` / ``--lr`` / ``--set``), and the model,
data module, Mixup/CutMix and soft-target loss come from mixbench's own builders (``build_model``,
``build_datamodule``, ``build_lightning_module``): block, init, drop-path 0.1, crop + flip, Mixup 0.8 / CutMix 1.0,
label smoothing 0.1, AdamW (wd 0.05 on matrices), peak lr = ``optim.lr`` × 256 / 4096 and the 930-step
warm-up (93) + cosine schedule are the recipe's.

Differs from the GPU runs: CPU; fp32, not bf16-mixed (``--bf16`` runs the train step under CPU bf16 autocast);
eager, no torch.compile; PyTorch's CPU SDPA kernel; one process, no DDP; no EMA (it does not touch training); only
the first ``--steps`` steps; data order, Mixup draws and init come from this process's RNG.  ``--batch`` below 256
keeps the GPU run's per-step lr and step schedule (the lr is not rescaled by the batch).

Every step: train loss (Mixup soft-target CE) and global grad norm.  Every ``--log`` steps, on a fixed probe batch of
``--probe`` unaugmented validation images in eval mode, per block: attention entropy (mean over images, heads and
queries; ln 65 = 4.17 is uniform) and the CLS query's, max |attention logit| (q·k/√d), RMS of the attention / MLP
branch output before (``ba``/``bm``) and after (``pa``/``pm``) its output norm, the output-norm gain mean
(``ga``/``gm``), the residual-stream RMS after the block (``res``), the CLS token's input dependence after the block
(``dep``: ‖std over images‖ / ‖mean over images‖), the share of the mean square of the attention / MLP increment
(``ca``/``cm``) and of the stream after the block (``cres``) held by the one vector common to all images and tokens,
and each block's grad norm at the last step (``bgn``); plus the probe's CE and top-1 and the input dependence of the
pre-logits and logits.  One JSON object per line on stdout.  Example:
    PYTHONPATH=. python bench/studies/vit_collapse/probe.py --norm sandwich --lr 8e-3 --seed 0 --batch 64 --steps 150
"""

import argparse
import json
import math
import time

import lightning as L
import torch
import torch.nn.functional as F

import mixbench
from mixbench.layers.attention import project_qkv
from mixbench.models import build_model
from mixbench.training.builders import build_datamodule, build_lightning_module, model_options
from mixbench.training.config import norm_spec
from mixbench.training.optim import build_optimizer, warmup_cosine

RECIPE = [
    "task=in1k_vit_tiny",
    "scale=proxy",
    "data=cifar10_proxy",
    "model.patch_size=4",
    "trainer.max_epochs=30",
    "optim.warmup_epochs=3",
    "ema.decay=0.999",
    "data.num_workers=0",
]
GPU_BATCH, STEPS_PER_EPOCH = 256, 31  # the GPU runs: 8,000 images, batch 256, drop_last

p = argparse.ArgumentParser()
p.add_argument("--norm", default="sandwich")
p.add_argument("--lr", type=float, default=8e-3, help="optim.lr (the GPU's per-step peak lr is this × 256/4096)")
p.add_argument("--seed", type=int, default=0)
p.add_argument("--steps", type=int, default=150)
p.add_argument("--batch", type=int, default=256)
p.add_argument("--log", type=int, default=5)
p.add_argument("--probe", type=int, default=64)
p.add_argument("--set", nargs="*", default=[], help="more overrides, e.g. norm.qk_norm=head")
p.add_argument("--bf16", action="store_true", help="train step under CPU bf16 autocast (the recipe's bf16-mixed); probes stay fp32")
p.add_argument("--tag", default="")
p.add_argument("--data", default=".data/cifar/cifar10_bigbench.npz", help="the CIFAR-10 .npz (bench/grids/placements_proxy.sh's)")
a = p.parse_args()
torch.set_num_threads(1)

cfg = mixbench.compose(
    [*RECIPE, f"norm={a.norm}", f"optim.lr={a.lr}", f"seed={a.seed}", f"data.batch_size={a.batch}", f"data.path={a.data}", *a.set]
)
L.seed_everything(cfg.seed, verbose=False)
dm = build_datamodule(cfg)
model = build_model(cfg.model.name, norm_spec(cfg), seed=cfg.seed, **model_options(cfg, dm))
module = build_lightning_module(cfg, model, dm)  # Mixup/CutMix with label smoothing, as the run's training_step
oc = cfg.optim
lr = oc.lr * GPU_BATCH / oc.lr_reference_batch
total = cfg.trainer.max_epochs * STEPS_PER_EPOCH
warmup = int(round(oc.warmup_epochs * total / cfg.trainer.max_epochs))
opt = build_optimizer(model, oc.name, lr, oc.weight_decay, tuple(oc.betas), oc.eps, fused=False)
floor = oc.min_lr / lr if oc.min_lr is not None else oc.min_lr_ratio
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: warmup_cosine(s, total, warmup, floor))
blocks = list(model.blocks)
outnorm = hasattr(blocks[0], "norm1_post")

g = torch.Generator().manual_seed(1234)
pidx = torch.randperm(len(dm.val_set), generator=g)[: a.probe]
probe_x = torch.stack([dm.val_set[int(i)][0] for i in pidx])
probe_y = torch.stack([dm.val_set[int(i)][1] for i in pidx])

stats: dict = {}
hooks_on = [False]


def rms(t):
    return t.detach().float().pow(2).mean().sqrt().item()


def dep(t):  # (B, C): spread over the batch relative to the common vector
    return (t.std(0).norm() / t.mean(0).norm().clamp_min(1e-12)).item()


def const(t):  # (B, T, C): share of the mean square held by the one vector common to all images and tokens
    t = t.detach().float()
    return (t.mean((0, 1)).pow(2).sum() / t.pow(2).sum(-1).mean()).item()


def attn_pre(i):
    def f(mod, args, kwargs):
        if not hooks_on[0]:
            return
        with torch.no_grad():
            q, k, _ = project_qkv(mod, args[0])
            logit = (q @ k.transpose(-1, -2)) * mod.scale
            prob = logit.softmax(-1)
            ent = -(prob * prob.clamp_min(1e-30).log()).sum(-1)  # (B, H, T)
            stats.setdefault("ent", {})[i] = ent.mean().item()
            stats.setdefault("ent_cls", {})[i] = ent[:, :, 0].mean().item()
            stats.setdefault("maxlogit", {})[i] = logit.abs().max().item()

    return f


def out_hook(key, i, fn=rms):
    def f(mod, inp, out):
        if hooks_on[0]:
            stats.setdefault(key, {})[i] = fn(out)

    return f


for i, b in enumerate(blocks):
    b.attn.register_forward_pre_hook(attn_pre(i), with_kwargs=True)
    b.attn.register_forward_hook(out_hook("ba", i))
    b.mlp.register_forward_hook(out_hook("bm", i))
    if outnorm:
        b.norm1_post.register_forward_hook(out_hook("pa", i))
        b.norm2_post.register_forward_hook(out_hook("pm", i))
    inc_a, inc_m = (b.norm1_post, b.norm2_post) if outnorm else (b.attn, b.mlp)  # what is added to the stream
    inc_a.register_forward_hook(out_hook("ca", i, const))
    inc_m.register_forward_hook(out_hook("cm", i, const))
    b.register_forward_hook(out_hook("cres", i, const))
    b.register_forward_hook(out_hook("res", i))
    b.register_forward_hook(out_hook("dep", i, lambda o: dep(o[:, 0].detach())))


def probe(step, losses, gnorms, block_gn):
    model.eval()
    stats.clear()
    hooks_on[0] = True
    feats = {}
    h = model.head.register_forward_hook(lambda m, i, o: feats.update(pre=i[0].detach(), logits=o.detach()))
    with torch.no_grad():
        logits = model(probe_x)
    h.remove()
    hooks_on[0] = False
    model.train()
    r = lambda v: float(f"{v:.4g}") if math.isfinite(v) else None  # noqa: E731  (null, not NaN: strict JSON)
    rec = {
        "tag": a.tag,
        "step": step,
        "lr": r(opt.param_groups[0]["lr"]),
        "loss": r(sum(losses) / len(losses)),
        "gn": r(sum(gnorms) / len(gnorms)),
        "gn_max": r(max(gnorms)),
        "probe_ce": r(F.cross_entropy(logits, probe_y).item()),
        "probe_top1": r(100 * (logits.argmax(-1) == probe_y).float().mean().item()),
        "pre_dep": r(dep(feats["pre"])),
        "logit_dep": r(dep(feats["logits"])),
        "logit_std": r(feats["logits"].std(0).mean().item()),
    }
    for key in ("ent", "ent_cls", "maxlogit", "ba", "pa", "bm", "pm", "res", "dep", "ca", "cm", "cres"):
        if key in stats:
            rec[key] = [r(stats[key][i]) for i in range(len(blocks))]
    if outnorm:
        rec["ga"] = [r(b.norm1_post.weight.mean().item()) for b in blocks]
        rec["gm"] = [r(b.norm2_post.weight.mean().item()) for b in blocks]
    rec["bgn"] = [r(v) for v in block_gn]
    print(json.dumps(rec, allow_nan=False), flush=True)
    return rec


print(
    json.dumps({"tag": a.tag, "args": vars(a), "norm": norm_spec(cfg).label(), "peak_lr": lr, "total": total, "warmup": warmup}), flush=True
)
t0 = time.time()
step, losses, gnorms = 0, [], []
probe(0, [math.nan], [math.nan], [math.nan] * len(blocks))
params = [q for q in model.parameters() if q.requires_grad]
while step < a.steps:
    for images, targets in dm.train_dataloader():
        images, soft = module.mixup(images, targets)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            loss = torch.sum(-soft * F.log_softmax(model(images), dim=-1), dim=-1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorms.append(torch.linalg.vector_norm(torch.stack([q.grad.norm() for q in params if q.grad is not None])).item())
        losses.append(loss.item())
        step += 1
        if step % a.log == 0:
            bgn = [math.sqrt(sum(q.grad.pow(2).sum().item() for q in b.parameters() if q.grad is not None)) for b in blocks]
        opt.step()
        sched.step()
        if step % a.log == 0:
            probe(step, losses, gnorms, bgn)
            losses, gnorms = [], []
        if step >= a.steps:
            break
print(json.dumps({"tag": a.tag, "done": step, "wall_s": round(time.time() - t0, 1)}), flush=True)
