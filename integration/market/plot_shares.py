"""Plots the traffic share per endpoint over time under each policy (make bench-routing)."""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src, dst = sys.argv[1], sys.argv[2]
series = defaultdict(lambda: defaultdict(list))  # policy -> endpoint -> [(t, share)]
for row in csv.DictReader(open(src)):
    series[row["policy"]][row["endpoint"]].append((float(row["t_s"]), float(row["share"])))
policies = sorted(series)
fig, axes = plt.subplots(len(policies), 1, figsize=(10, 3.2 * len(policies)), sharex=True)
if len(policies) == 1:
    axes = [axes]
for ax, policy in zip(axes, policies):
    for endpoint, points in sorted(series[policy].items()):
        points.sort()
        xs, ys = [], []
        for t, share in points:
            if xs and t - xs[-1] > 5.5:
                xs.append(float("nan"))  # the other policy's block: no line across it
                ys.append(float("nan"))
            xs.append(t)
            ys.append(share)
        ax.plot(xs, ys, marker="o", markersize=3, label=endpoint)
    ax.set_title(f"{policy}: share of first attempts per endpoint (5 s buckets, its blocks only)")
    ax.set_ylabel("share")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
axes[0].legend(ncol=4, fontsize=8)
axes[-1].set_xlabel("market time (s)")
fig.tight_layout()
fig.savefig(dst, dpi=110)
print(f"wrote {dst}")
