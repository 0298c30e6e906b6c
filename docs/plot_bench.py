"""Plots intranode-bench JSON results: latency and bus bandwidth against
message size, ours against NCCL (CUDA-graph replay).

usage: python3 docs/plot_bench.py OUT.png bench_w2.json [bench_w4.json ...]
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    out, files = sys.argv[1], sys.argv[2:]
    fig, axes = plt.subplots(len(files), 2, figsize=(10, 3.2 * len(files)), squeeze=False)
    for row, path in zip(axes, files):
        rows = json.load(open(path))
        world = rows[0]["world"]
        for algo, style in [("auto", "-o"), ("one-shot", ":"), ("two-shot", "--"), ("nccl", "-s")]:
            pts = [r for r in rows if r["algo"] == algo]
            if not pts:
                continue
            x = [r["bytes"] for r in pts]
            label = "intranode auto" if algo == "auto" else algo
            row[0].plot(x, [r["graph_us"] for r in pts], style, label=label, markersize=3)
            row[1].plot(x, [r["busbw_gbps"] for r in pts], style, label=label, markersize=3)
        for ax, ylab in zip(row, ["us per call (graph replay)", "bus bandwidth GB/s"]):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("bytes (bf16)")
            ax.set_ylabel(ylab)
            ax.set_title(f"{world} x H200, all-reduce")
            ax.grid(True, which="both", alpha=0.3)
        row[0].set_yscale("log")
        row[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


if __name__ == "__main__":
    main()
