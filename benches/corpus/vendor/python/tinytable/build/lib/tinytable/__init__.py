"""Render rows as a plain-text table (vendored for the corpus benchmark, built into a wheel)."""

__version__ = "1.0.2"


def render(rows, header=None):
    rows = [[str(c) for c in r] for r in rows]
    if header:
        rows.insert(0, [str(h) for h in header])
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(max(len(r) for r in rows))]
    lines = []
    for n, r in enumerate(rows):
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip())
        if header and n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
