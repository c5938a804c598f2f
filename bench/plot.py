"""The benchmark runners' charts: SVG files drawn by matplotlib (Debian's
python3-matplotlib, which `make peers` installs) with its Agg backend, so
that no display is needed.

- ratio_bars(): grouped bars of figures relative to a baseline allocator
  (bench/run.py's latest.svg);
- time_lines(): lines over time, panels sharing the time axis, phases
  shaded (bench/soak.py's soak.svg, bench/ace_plot.py's ace.svg).

Without matplotlib, MISSING is the line a runner prints instead of drawing;
its other outputs do not need it.
"""

import math
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot, ticker
    # text stays text in the SVG, not glyph outlines: it can be searched,
    # and the files are half the size
    matplotlib.rcParams["svg.fonttype"] = "none"
    MISSING = None
except ImportError:
    MISSING = ("no chart drawn: %s cannot import matplotlib; install python3-matplotlib (`make peers`), "
               "which Debian's /usr/bin/python3 imports" % sys.executable)

COLOURS = {
    "glibc": "#7f7f7f",
    "hakmem": "#d62728",
    "mimalloc": "#1f77b4",
    "jemalloc": "#2ca02c",
    "tcmalloc": "#ff7f0e",
}
EXTRA = ["#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
LOG2_RANGE = 7   # the bars' axis spans at most 2^-7..2^7; beyond, a bar is cut and labelled


def colour(name, i):
    """An allocator's colour: its own, or the i-th of the others."""
    return COLOURS.get(name, EXTRA[i % len(EXTRA)])


def _save(fig, path):
    fig.savefig(path, format="svg")
    pyplot.close(fig)


def ratio_bars(path, title, info_lines, panels, groups, allocs, base):
    """Panels of grouped bars, one group per item of groups and one bar per
    allocator: panels is [(title, note, values)], values[group][allocator]
    a ratio to base's figure, "FAIL" or absent. The axis is log2 and the
    bars grow from the 1.0 line, so 2x and 0.5x look equally far from it."""
    # inches: the head (title, info lines, legend), a panel, and the room
    # under it for the names turned 35 degrees
    width = max(10.0, 1.3 + len(groups) * (0.2 * len(allocs) + 0.15))
    head, panel, below = 1.0 + 0.17 * len(info_lines), 2.6, 1.3
    height = head + len(panels) * (0.4 + panel + below)
    fig, axes = pyplot.subplots(len(panels), 1, figsize=(width, height), squeeze=False)
    fig.subplots_adjust(left=1.0 / width, right=1 - 0.2 / width, top=1 - (head + 0.4) / height,
                        bottom=below / height, hspace=(below + 0.4) / panel)
    fig.text(1.0 / width, 1 - 0.35 / height, title, fontsize=15, fontweight="bold")
    for i, line in enumerate(info_lines):
        fig.text(1.0 / width, 1 - (0.55 + 0.17 * i) / height, line, fontsize=8, color="#555")
    bar = min(0.8 / len(allocs), 0.3)
    for ax, (panel_title, note, values) in zip(axes[:, 0], panels):
        nums = [v for g in groups for v in values[g].values() if isinstance(v, float) and v > 0]
        lo = max(math.floor(math.log2(min(nums + [0.5]))), -LOG2_RANGE)
        hi = min(math.ceil(math.log2(max(nums + [2.0]))), LOG2_RANGE)
        ax.set_yscale("log", base=2)
        ax.set_ylim(2.0 ** lo, 2.0 ** hi)
        ax.set_yticks([2.0 ** e for e in range(lo, hi + 1)],
                      ["%g×" % 2.0 ** e if e >= 0 else "1/%g×" % 2.0 ** -e for e in range(lo, hi + 1)])
        ax.minorticks_off()
        ax.grid(axis="y", color="#ddd")
        ax.axhline(1.0, color="black", linewidth=1.2)
        ax.set_ylabel("relative to %s (log scale)" % base)
        ax.set_title(panel_title, loc="left", fontweight="bold")
        ax.set_title(note, loc="right", fontsize=9, color="#444")
        ax.set_xlim(-0.5, len(groups) - 0.5)
        ax.set_xticks(range(len(groups)), groups, rotation=35, ha="right")
        for gi, g in enumerate(groups):
            if gi % 2:
                ax.axvspan(gi - 0.5, gi + 0.5, color="#f4f4f4", zorder=0)
            for j, a in enumerate(allocs):
                x = gi + (j - (len(allocs) - 1) / 2) * bar
                v = values[g].get(a)
                if v == "FAIL":
                    ax.text(x, 1.0, "FAIL", rotation=90, ha="center", va="bottom", fontsize=8,
                            color="#c00", fontweight="bold")
                elif isinstance(v, float) and v > 0:
                    top = min(max(v, 2.0 ** lo), 2.0 ** hi)
                    ax.bar(x, top - 1.0, bar * 0.9, bottom=1.0, color=colour(a, j), zorder=2)
                    if top != v:
                        ax.text(x, top, "%.3g×" % v, ha="center", va="bottom" if v > 1 else "top", fontsize=7)
    fig.legend([pyplot.Rectangle((0, 0), 1, 1, color=colour(a, j)) for j, a in enumerate(allocs)],
               [a + (" (baseline, = 1×)" if a == base else "") for a in allocs], loc="upper left",
               bbox_to_anchor=(1.0 / width, 1 - (0.6 + 0.17 * len(info_lines)) / height),
               ncol=len(allocs), frameon=False)
    _save(fig, path)


def time_lines(path, panels, title=None, phases=()):
    """Panels of lines over time, one above the other, each with its legend
    at its right: panels is [(title, unit, series)], series [(label,
    colour, [(seconds, value)], dashed)]; phases [(start s, end s, name)],
    shaded one in two and named."""
    fig, axes = pyplot.subplots(len(panels), 1, figsize=(12, 0.6 + 3.2 * len(panels)), sharex=True,
                                squeeze=False)
    if title:
        fig.suptitle(title, x=0.01, ha="left", fontweight="bold")
    for ax, (panel_title, unit, series) in zip(axes[:, 0], panels):
        for k, (start, end, name) in enumerate(phases):
            if k % 2 == 0:
                ax.axvspan(start, end, color="#f4f4f4", zorder=0)
            ax.text(start, 0.98, " " + name, transform=ax.get_xaxis_transform(), va="top", fontsize=8,
                    color="#666")
        for label, line_colour, points, dashed in series:
            ax.plot([t for t, _ in points], [v for _, v in points], color=line_colour, linewidth=1.5,
                    linestyle=(0, (4, 3)) if dashed else "-", label=label)
        ax.set_title(panel_title, loc="left", fontweight="bold", fontsize=11)
        ax.set_ylabel(unit)
        ax.set_ylim(0, 1.1 * max((v for _, _, points, _ in series for _, v in points), default=0) or 1)
        ax.grid(color="#ddd")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False, fontsize=9)
    axes[-1, 0].set_xlim(left=0)
    axes[-1, 0].xaxis.set_major_formatter(ticker.StrMethodFormatter("{x:g} s"))
    fig.tight_layout()
    _save(fig, path)
