"""Folded stacks (``comm;outer;…;inner COUNT``, kernel frames ending ``_[k]``) made into
what people read: a self-contained SVG flame graph that any browser opens (no script, no
network: each frame's ``<title>`` is its tooltip), the same profile in speedscope's file
format (https://www.speedscope.app/file-format-schema.json, for the speedscope viewer),
and the hottest kernel functions in words.

Why a renderer of our own: no maintained flame-graph renderer is packaged for Python or
Debian 12 (FlameGraph's ``flamegraph.pl`` is not in Debian 12; inferno is a Rust crate;
speedscope's viewer is a multi-file web app, not one file to keep in a bundle). The SVG
follows flamegraph.pl's layout (root at the bottom, width = samples, kernel frames in
orange) and stays small: frames under ``min_fraction`` of the samples are merged away.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from html import escape
from typing import Any

KERNEL = "_[k]"
UNINTERRUPTIBLE = "[uninterruptible]"  # the /proc fallback's mark of a task in D state


@dataclass
class _Node:
    name: str
    value: int = 0
    children: dict[str, _Node] = field(default_factory=dict)


def _tree(folded: Counter[str]) -> _Node:
    root = _Node("all")
    for stack, n in folded.items():
        root.value += n
        node = root
        for frame in stack.split(";"):
            node = node.children.setdefault(frame, _Node(frame))
            node.value += n
    return root


def _color(name: str) -> str:
    h = int(hashlib.blake2s(name.encode(), digest_size=2).hexdigest(), 16)
    if name.endswith(KERNEL):  # kernel: orange, as flamegraph.pl --color=java's
        return f"rgb({220 + h % 35},{120 + h % 60},{40 + h % 30})"
    if name.startswith("["):
        return "rgb(200,200,200)"
    return f"rgb({205 + h % 50},{60 + h % 120},{50 + h % 40})"


def svg(folded: Counter[str], title: str, width: int = 1200, frame_height: int = 17,
        min_fraction: float = 0.001) -> str:
    """A flame graph of ``folded`` as one SVG document."""
    root = _tree(folded)
    total = max(root.value, 1)
    rows: list[tuple[int, float, float, _Node]] = []  # depth, x, w, node

    def depth_of(node: _Node) -> int:
        return 1 + max((depth_of(c) for c in node.children.values()
                        if c.value / total >= min_fraction), default=0)

    def place(node: _Node, depth: int, x: float) -> None:
        w = (width - 20) * node.value / total
        rows.append((depth, x, w, node))
        cx = x
        for child in sorted(node.children.values(), key=lambda c: c.name):
            if child.value / total >= min_fraction:
                place(child, depth + 1, cx)
            cx += (width - 20) * child.value / total

    place(root, 0, 10.0)
    levels = depth_of(root)
    top_pad, bottom_pad = 50, 30
    height = top_pad + levels * frame_height + bottom_pad
    out = [f'<?xml version="1.0" standalone="no"?>\n'
           f'<svg version="1.1" xmlns="http://www.w3.org/2000/svg" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}">',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="rgb(250,250,238)"/>',
           f'<text x="{width // 2}" y="24" text-anchor="middle" font-family="Verdana" '
           f'font-size="17">{escape(title)}</text>',
           f'<text x="10" y="{height - 10}" font-family="Verdana" font-size="12">'
           f'{root.value} samples; kernel frames orange (_[k]); hover for names</text>']
    for depth, x, w, node in rows:
        y = height - bottom_pad - (depth + 1) * frame_height
        pct = 100.0 * node.value / total
        label = escape(node.name)
        out.append(f'<g><title>{label} ({node.value} samples, {pct:.2f}%)</title>'
                   f'<rect x="{x:.1f}" y="{y}" width="{max(w - 0.5, 0.1):.1f}" '
                   f'height="{frame_height - 1}" fill="{_color(node.name)}" rx="2"/>')
        chars = int(w / 7)
        if chars >= 3:
            text = node.name if len(node.name) <= chars else node.name[:chars - 2] + ".."
            out.append(f'<text x="{x + 3:.1f}" y="{y + frame_height - 5}" '
                       f'font-family="Verdana" font-size="12">{escape(text)}</text>')
        out.append("</g>")
    out.append("</svg>\n")
    return "\n".join(out)


def speedscope(folded: Counter[str], name: str) -> dict[str, Any]:
    """The profile in speedscope's file format: one sampled profile, stacks root first."""
    index: dict[str, int] = {}
    samples: list[list[int]] = []
    weights: list[int] = []
    for stack, n in sorted(folded.items()):
        samples.append([index.setdefault(f, len(index)) for f in stack.split(";")])
        weights.append(n)
    total = sum(weights)
    return {"$schema": "https://www.speedscope.app/file-format-schema.json",
            "exporter": "guardian", "name": name, "activeProfileIndex": 0,
            "shared": {"frames": [{"name": f} for f in index]},
            "profiles": [{"type": "sampled", "name": name, "unit": "none",
                          "startValue": 0, "endValue": total,
                          "samples": samples, "weights": weights}]}


def hottest_kernel(folded: Counter[str], top: int = 5) -> dict[str, Any]:
    """Where sampled kernel time went: a sample is kernel time when its innermost frame
    is a kernel frame; that frame is the function it was in (self time). The functions
    by samples (with the commands that were in them), and the commands by kernel
    samples. The idle task (``swapper``) is no kernel *work*: left out."""
    functions: Counter[str] = Counter()
    by_comm: Counter[str] = Counter()
    pairs: Counter[tuple[str, str]] = Counter()
    total = kernel = 0
    for stack, n in folded.items():
        total += n
        frames = stack.split(";")
        if len(frames) < 2 or not frames[-1].endswith(KERNEL) or _idle(frames[0]):
            continue
        kernel += n
        fn = frames[-1][:-len(KERNEL)]
        if frames[1] == UNINTERRUPTIBLE:
            fn += " (uninterruptible wait)"
        functions[fn] += n
        by_comm[frames[0]] += n
        pairs[(frames[0], fn)] += n
    return {
        "samples": total, "kernel_samples": kernel,
        "functions": [{"function": fn, "samples": n,
                       "pct": round(100.0 * n / kernel, 1) if kernel else 0.0,
                       "comms": {c: m for (c, f), m in pairs.most_common() if f == fn}}
                      for fn, n in functions.most_common(top)],
        "comms": [{"comm": c, "samples": n,
                   "pct": round(100.0 * n / kernel, 1) if kernel else 0.0}
                  for c, n in by_comm.most_common(top)],
        "top": [{"comm": c, "function": f, "samples": n,
                 "pct": round(100.0 * n / kernel, 1) if kernel else 0.0}
                for (c, f), n in pairs.most_common(top)],
    }


def _idle(comm: str) -> bool:
    return comm == "swapper" or comm.startswith("swapper/")


def hot_line(hot: dict[str, Any]) -> str:
    """One line, with the counts a percentage comes from: ``kubelet: 41 of 100 kernel
    samples (41%) in mem_cgroup_nr_lru_pages (then kubelet 39 in other)``."""
    top = hot.get("top") or []
    if not top:
        return f"no kernel stacks sampled ({hot.get('samples', 0)} samples)"
    first = top[0]
    line = (f"{first['comm']}: {first['samples']} of {hot['kernel_samples']} kernel "
            f"samples ({first['pct']:g}%) in {first['function']}")
    more = [f"{t['comm']} {t['samples']} in {t['function']}" for t in top[1:3]]
    return line + (f" (then {', '.join(more)})" if more else "")
