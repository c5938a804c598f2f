"""Hand-written SVG grouped bar chart of the benchmark results (stdlib only).

Two panels, one group of bars per workload and one colour per allocator:
throughput relative to the baseline (higher is better) and peak RSS relative
to the baseline (lower is better). Both use a log2 axis centred on 1.0 and
bars grow from the 1.0 line, so 2x and 0.5x look equally far from it.
"""

import math
from xml.sax.saxutils import escape

COLOURS = {
    "glibc": "#7f7f7f",
    "hakmem": "#d62728",
    "mimalloc": "#1f77b4",
    "jemalloc": "#2ca02c",
    "tcmalloc": "#ff7f0e",
}
EXTRA = ["#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]


def _colour(name, i):
    return COLOURS.get(name, EXTRA[i % len(EXTRA)])


def _panel(out, x0, y0, width, height, title, values, allocs, workloads, base,
           better):
    """values[w][a] = ratio or None (missing) or 'FAIL'."""
    nums = [v for w in workloads for v in values[w].values()
            if isinstance(v, float) and v > 0]
    lo = math.floor(math.log2(min(nums + [0.5])))
    hi = math.ceil(math.log2(max(nums + [2.0])))
    lo, hi = max(lo, -7), min(hi, 7)
    if lo == hi:
        hi += 1

    def y(v):
        lv = min(max(math.log2(v), lo), hi)
        return y0 + height - (lv - lo) / (hi - lo) * height

    out.append('<text x="%d" y="%d" class="title">%s</text>'
               % (x0, y0 - 12, escape(title)))
    out.append('<text x="%d" y="%d" class="note" text-anchor="end">%s</text>'
               % (x0 + width, y0 - 12, escape(better)))
    for e in range(lo, hi + 1):
        v = 2.0 ** e
        yy = y(v)
        label = ("%g×" % v) if v >= 1 else ("1/%g×" % (1 / v))
        cls = "axis1" if e == 0 else "grid"
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" class="%s"/>'
                   % (x0, yy, x0 + width, yy, cls))
        out.append('<text x="%d" y="%.1f" class="tick" text-anchor="end">%s</text>'
                   % (x0 - 6, yy + 4, label))
    out.append('<text x="%d" y="%d" class="tick" text-anchor="middle" '
               'transform="rotate(-90 %d %d)">relative to %s (log scale)</text>'
               % (x0 - 48, y0 + height // 2, x0 - 48, y0 + height // 2, escape(base)))
    n = len(workloads)
    gw = width / max(n, 1)
    bw = min(16.0, (gw - 10) / max(len(allocs), 1))
    for i, w in enumerate(workloads):
        gx = x0 + i * gw + (gw - bw * len(allocs)) / 2
        if i % 2 == 1:
            out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" class="band"/>'
                       % (x0 + i * gw, y0, gw, height))
        for j, a in enumerate(allocs):
            v = values[w].get(a)
            bx = gx + j * bw
            if v == "FAIL":
                out.append('<text x="%.1f" y="%.1f" class="fail" text-anchor="middle" '
                           'transform="rotate(-90 %.1f %.1f)">FAIL</text>'
                           % (bx + bw / 2 + 4, y(1.0) - 4, bx + bw / 2 + 4, y(1.0) - 4))
                continue
            if not isinstance(v, float) or v <= 0:
                continue
            y1, yb = y(v), y(1.0)
            top, h = min(y1, yb), max(abs(y1 - yb), 1.0)
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s">'
                       '<title>%s %s: %.3g×</title></rect>'
                       % (bx + 0.5, top, bw - 1, h, _colour(a, j), escape(w), escape(a), v))
            if math.log2(v) > hi or math.log2(v) < lo:
                out.append('<text x="%.1f" y="%.1f" class="clip" text-anchor="middle">'
                           '%.2g</text>' % (bx + bw / 2, (y0 - 2) if v > 1 else
                                            (y0 + height + 10), v))
    for i, w in enumerate(workloads):
        cx = x0 + i * gw + gw / 2
        out.append('<text x="%.1f" y="%d" class="label" text-anchor="end" '
                   'transform="rotate(-35 %.1f %d)">%s</text>'
                   % (cx, y0 + height + 16, cx, y0 + height + 16, escape(w)))


def chart(results, allocs, base, workloads, info_lines):
    """results[w][a] = summary dict (median, rss_kib_median, failed)."""
    workloads = [w for w in workloads if w in results]
    thr, rss = {}, {}
    for w in workloads:
        thr[w], rss[w] = {}, {}
        b = results[w].get(base)
        bok = b is not None and not b["failed"]
        for a in allocs:
            s = results[w][a]
            if s["failed"]:
                thr[w][a] = rss[w][a] = "FAIL"
            elif bok and b["median"] and b["rss_kib_median"]:
                thr[w][a] = float(s["median"] / b["median"])
                rss[w][a] = float(s["rss_kib_median"] / b["rss_kib_median"])
    left, right = 80, 20
    gw = max(18 * len(allocs) + 14, 60)
    pw = max(gw * len(workloads), 900)
    width = left + pw + right
    ph = 230
    top1 = 110
    top2 = top1 + ph + 150
    height = top2 + ph + 130
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'viewBox="0 0 %d %d" font-family="DejaVu Sans, Arial, sans-serif">'
           % (width, height, width, height),
           '<style>'
           '.title{font-size:15px;font-weight:bold}.note{font-size:12px;fill:#444}'
           '.tick{font-size:11px;fill:#333}.label{font-size:12px;fill:#111}'
           '.grid{stroke:#ddd;stroke-width:1}.axis1{stroke:#000;stroke-width:1.2}'
           '.band{fill:#f4f4f4}.fail{font-size:11px;fill:#c00;font-weight:bold}'
           '.clip{font-size:9px;fill:#000}.info{font-size:11px;fill:#555}'
           '.legend{font-size:12px}</style>',
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="22" style="font-size:18px;font-weight:bold">hakmem benchmarks'
           '</text>' % left]
    for i, line in enumerate(info_lines):
        out.append('<text x="%d" y="%d" class="info">%s</text>'
                   % (left, 40 + 14 * i, escape(line[:180])))
    lx = left
    ly = 40 + 14 * len(info_lines) + 10
    for j, a in enumerate(allocs):
        out.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>'
                   % (lx, ly - 10, _colour(a, j)))
        label = a + (" (baseline, = 1×)" if a == base else "")
        out.append('<text x="%d" y="%d" class="legend">%s</text>' % (lx + 16, ly, escape(label)))
        lx += 40 + int(7.2 * len(label))
    shift = ly + 44 - top1
    top1 += shift
    top2 += shift
    height += shift
    out[0] = ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
              'viewBox="0 0 %d %d" font-family="DejaVu Sans, Arial, sans-serif">'
              % (width, height, width, height))
    _panel(out, left, top1, pw, ph, "Throughput relative to %s" % base, thr, allocs,
           workloads, base, "higher is better")
    _panel(out, left, top2, pw, ph, "Peak RSS relative to %s" % base, rss, allocs,
           workloads, base, "lower is better")
    out.append("</svg>")
    return "\n".join(out) + "\n"
