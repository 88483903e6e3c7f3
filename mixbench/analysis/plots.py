"""Figures of the layer analyses (matplotlib, Agg backend)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def grad_norm_figure(profiles: list[dict], title: str):
    fig, ax = plt.subplots(figsize=(7, 4))
    for p in profiles:
        ax.plot([b["total"] for b in p["blocks"]], marker="o", label=p["name"])
    ax.set_yscale("log")
    ax.set(xlabel="block", ylabel="gradient norm (attention + MLP)", title=title)
    ax.legend()
    return fig


def training_grad_norm_figure(runs: list[dict], title: str):
    """One panel per requested step, the placements overlaid (log scale, total of attention + MLP)."""
    panels = len(runs[0]["profiles"])
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.8), squeeze=False, sharey=True, layout="constrained")
    for k, ax in enumerate(axes[0]):
        for run in runs:
            profile = run["profiles"][k]
            ax.plot([b["total"] for b in profile["blocks"]], marker="o", markersize=3, label=f"{run['name']} (step {profile['step']})")
        ax.set_yscale("log")
        ax.set(xlabel="block", title=f"step {runs[0]['profiles'][k]['step']}")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("gradient norm (attention + MLP)")
    fig.suptitle(title)
    return fig


def angular_figure(profiles: list[dict], title: str):
    fig, axes = plt.subplots(1, len(profiles), figsize=(5 * len(profiles), 4), squeeze=False, layout="constrained")
    for ax, p in zip(axes[0], profiles):
        d = np.array([[np.nan if v is None else v for v in row] for row in p["distance"]])
        im = ax.imshow(d, origin="lower", cmap="viridis_r", vmin=0.0, vmax=np.nanmax(d) if np.isfinite(d).any() else 1.0, aspect="auto")
        ax.set(xlabel="initial block ℓ", ylabel="block distance n", title=f"{p['name']} ({p['tokens']:,} tokens)")
        ax.set_yticks(range(d.shape[0]), [str(n + 1) for n in range(d.shape[0])])
        fig.colorbar(im, ax=ax, label="angular distance")
    fig.suptitle(title)
    return fig


def prune_figure(profiles: list[dict], title: str):
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(profiles)
    for i, p in enumerate(profiles):
        x = np.arange(len(p["delta"])) + i * width
        ax.bar(x, p["delta"], width=width, label=f"{p['name']} (original {p['original']:.3g})")
    ax.set(xlabel="removed block ℓ", ylabel=f"ΔP = P_pruned − P_original ({profiles[0]['metric']})", title=title)
    ax.axhline(0, color="black", linewidth=0.5)
    if max(abs(d) for p in profiles for d in p["delta"]) > 100:  # one catastrophic block would flatten the rest
        ax.set_yscale("symlog", linthresh=1.0)
    ax.legend()
    return fig
