"""Draws the dashboard's main panels from a run's query results (Grafana does not install here).

Input: the range-query results integration/tests/dashboard.rs writes (target/observability/
panels.json: panel title -> [{expr, result: Prometheus range data}]). Output: one PNG with a
subplot per panel, each series as Grafana would draw it (a bar chart for the bar-gauge panel).

    python observability/plot_panels.py target/observability/panels.json docs/observability-dashboard.png
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Each panel's legend per target, as the dashboard's legendFormat says.
LEGENDS = {
    "Attempts by provider and outcome": ["{gen_ai_provider_name} {outcome}"],
    "Spend by model and provider (USD/hour)": ["{gen_ai_response_model} @ {gen_ai_provider_name}"],
    "Tokens by team and type (tokens/s)": ["{caller} {gen_ai_token_type}"],
    "Time to first token by provider (p50, p95)": ["p50 {gen_ai_provider_name}", "p95 {gen_ai_provider_name}"],
    "Endpoints cooling down": ["{model} @ {gen_ai_provider_name}", "429/s {gen_ai_provider_name}"],
    "Spend by team over the range (USD)": ["{caller}"],
}


def label(title, metric, index):
    formats = LEGENDS.get(title, [])
    try:
        return formats[min(index, len(formats) - 1)].format(**metric)
    except (KeyError, IndexError):
        return ", ".join(f"{k}={v}" for k, v in metric.items()) or "value"


def main(src, dst):
    panels = json.load(open(src))
    fig, axes = plt.subplots(3, 2, figsize=(14, 11))
    for ax, (title, targets) in zip(axes.flat, panels.items()):
        ax.set_title(title, fontsize=10)
        if title.startswith("Spend by team"):
            # A bar gauge: the last value of each series.
            names, values = [], []
            for t in targets:
                for s in t["result"]["result"]:
                    names.append(label(title, s["metric"], 0))
                    values.append(float(s["values"][-1][1]))
            ax.barh(names, values, color="#3274d9")
            ax.set_xlabel("USD")
            continue
        start = None
        for i, t in enumerate(targets):
            for s in t["result"]["result"]:
                xs = [float(v[0]) for v in s["values"]]
                ys = [float(v[1]) for v in s["values"]]
                if not xs:
                    continue
                start = xs[0] if start is None else min(start, xs[0])
                ax.plot(xs, ys, label=label(title, s["metric"], i), linestyle="-" if i == 0 else "--")
        if start is not None:
            ticks = ax.get_xticks()
            ax.set_xticks(ticks)
            ax.set_xticklabels([f"{int(t - start)}s" for t in ticks], fontsize=8)
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(alpha=0.3)
    fig.suptitle("Switchyard dashboard, main panels (from a test run's Prometheus queries)")
    fig.tight_layout()
    fig.savefig(dst, dpi=90)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
