"""The norms written out by hand, for the placement formula tests (eps 1e-6 as the models' default)."""

import torch

EPS = 1e-6


def rms_norm(x, w):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def layer_norm(x, w, b):
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + EPS) * w + b
