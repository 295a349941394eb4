#!/usr/bin/python3
"""Plots a run's metrics.jsonl as a PNG of curves (matplotlib from the project's .venv: .venv/bin/python scripts/plot_metrics.py RUN_DIR).

  /usr/bin/python3 scripts/plot_metrics.py RUN_DIR_OR_METRICS_JSONL [OUT.png]

Panels: reward (mean +- std) per track, loss, clip fraction / approx-KL, entropy, grad norm,
response length, step time split into phases, and the held-out evaluation (eval section): mean
reward, greedy pass@1 and pass@k, plotted at the steps an evaluation ran.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src = sys.argv[1]
path = os.path.join(src, "metrics.jsonl") if os.path.isdir(src) else src
out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(path), "metrics.png")
rows = [json.loads(l) for l in open(path) if l.strip()]
if not rows:
    sys.exit(f"{path}: no metrics")
steps = [r["step"] for r in rows]
tracks = sorted({k.split("/")[0] for r in rows for k in r if k.startswith(("ar/", "image/"))})


def series(key):
    return [r.get(key, float("nan")) for r in rows]


panels = []
for t in tracks:
    panels.append((f"{t}: reward", [(f"{t}/reward/mean", "mean")], f"{t}/reward/std"))
    panels.append((f"{t}: loss", [(f"{t}/loss", "loss")], None))
    panels.append((f"{t}: clip / KL", [(f"{t}/pg/clipfrac", "clipfrac"), (f"{t}/pg/approx_kl", "approx KL"),
                                       (f"{t}/kl", "KL to ref")], None))
    panels.append((f"{t}: entropy / length", [(f"{t}/entropy", "entropy"), (f"{t}/response/len_mean", "resp len")], None))
for t in tracks:
    eval_keys = sorted({k for r in rows for k in r if k.startswith(f"{t}/eval/") and not k.endswith(("time_s", "prompts", "images"))},
                       key=lambda k: (not k.endswith("reward_mean"), len(k), k))
    if eval_keys:
        panels.append((f"{t}: held-out eval", [(k, k.split("/eval/")[1]) for k in eval_keys], None))
panels.append(("grad norm", [("grad_norm", "grad norm")], None))
phase_keys = sorted({k for r in rows for k in r if "/time/" in k and k.endswith("_s")})
panels.append(("phase time (s)", [(k, k.split("/", 1)[1]) for k in phase_keys] + [("time/step_s", "step")], None))

cols = 3
rows_n = (len(panels) + cols - 1) // cols
fig, axes = plt.subplots(rows_n, cols, figsize=(5 * cols, 3.2 * rows_n), squeeze=False)
for ax, (title, lines, band) in zip(axes.flat, panels):
    for key, label in lines:
        ys = series(key)
        if all(y != y for y in ys):
            continue
        if "/eval/" in key:  # evaluations run at some steps only: points where they did
            pts = [(x, y) for x, y in zip(steps, ys) if y == y]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=label, lw=1.2)
            continue
        ax.plot(steps, ys, label=label, lw=1.2)
        if band:
            sd = series(band)
            ax.fill_between(steps, [m - s for m, s in zip(ys, sd)], [m + s for m, s in zip(ys, sd)], alpha=0.2)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    if len(lines) > 1:
        ax.legend(fontsize=7)
for ax in list(axes.flat)[len(panels):]:
    ax.axis("off")
fig.suptitle(os.path.basename(os.path.dirname(os.path.abspath(path))))
fig.tight_layout()
fig.savefig(out, dpi=110)
print(f"wrote {out}")
