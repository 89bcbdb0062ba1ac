#!/usr/bin/env python3
"""Line plots as SVG with nothing but the standard library (GPU machines seldom have gnuplot).

usage (as a module): svg_plot.lines(path, title, x_label, y_label, xs, {name: [y per x]})
The x axis is categorical (one tick per x, evenly spaced: 1, 16, 64, 128 read better so).
"""
from xml.sax.saxutils import escape

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def lines(path, title, x_label, y_label, xs, series):
    w, h, left, right, top, bottom = 640, 400, 70, 170, 40, 50
    pw, ph = w - left - right, h - top - bottom
    ymax = max((y for ys in series.values() for y in ys if y is not None), default=1.0) * 1.08 or 1.0
    def px(i):
        return left + (pw * (i + 0.5) / len(xs))
    def py(y):
        return top + ph - ph * y / ymax
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>',
           f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="black"/>',
           f'<text x="{left + pw / 2}" y="{h - 10}" text-anchor="middle">{escape(x_label)}</text>',
           f'<text x="16" y="{top + ph / 2}" text-anchor="middle" transform="rotate(-90 16 {top + ph / 2})">{escape(y_label)}</text>']
    for k in range(6):
        y = ymax * k / 5
        out.append(f'<line x1="{left - 4}" y1="{py(y):.1f}" x2="{left + pw}" y2="{py(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 8}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.0f}</text>')
    for i, x in enumerate(xs):
        out.append(f'<text x="{px(i):.1f}" y="{top + ph + 18}" text-anchor="middle">{escape(str(x))}</text>')
    for n, (name, ys) in enumerate(series.items()):
        colour = COLOURS[n % len(COLOURS)]
        pts = [(px(i), py(y)) for i, y in enumerate(ys) if y is not None]
        if len(pts) > 1:
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="' +
                       " ".join(f"{a:.1f},{b:.1f}" for a, b in pts) + '"/>')
        out.extend(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3.5" fill="{colour}"/>' for a, b in pts)
        ly = top + 16 + 20 * n
        out.append(f'<line x1="{left + pw + 14}" y1="{ly - 4}" x2="{left + pw + 34}" y2="{ly - 4}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{left + pw + 40}" y="{ly}">{escape(name)}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
