"""Matplotlib figures for the analyses; each function returns a Figure (the caller saves or
shows it). Shared by the notebooks and ``python -m gsd_lab figures``."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from .toy import Theorem1Check
from .top1 import Top1Stats


def _figure(
    ncols: int = 1, nrows: int = 1, size: tuple[float, float] = (4.2, 3.2)
) -> tuple[Figure, Any]:
    # A bare Figure (no pyplot state): nothing leaks into notebooks as a repr or a second draw.
    fig = Figure(figsize=(size[0] * ncols, size[1] * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _label(
    ax: Any, xlabel: str, ylabel: str, title: str | None = None, *, title_size: float | None = None,
    xscale: str | None = None, yscale: str | None = None, legend: float | None = None,
) -> None:
    """Name the axes of ``ax``; a title (at ``title_size`` points when given), log scales and a
    legend (at ``legend`` points) where asked."""
    if xscale:
        ax.set_xscale(xscale)
    if yscale:
        ax.set_yscale(yscale)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title, **({} if title_size is None else {"fontsize": title_size}))
    if legend is not None:
        ax.legend(fontsize=legend)


def _legend_right(fig: Figure, axes: Any) -> None:
    """The first panel's legend, once, outside the panels on the right."""
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize=8)


def tv_flat_vs_peaked(pairs: dict[str, tuple[Any, Any]], tvs: dict[str, float]) -> Figure:
    """The two Fig. 6 pairs: p and q per token (sorted by p, then by q), with their TV."""
    fig, axes = _figure(2)
    for ax, (name, (p, q)) in zip(axes[0], pairs.items()):
        p, q = np.asarray(p), np.asarray(q)
        order = np.lexsort((-q, -p))
        ax.plot(p[order], label="target p", lw=1.5)
        ax.plot(q[order], label="draft q", lw=1.0, alpha=0.8)
        title = f"{name}: TV = {tvs[name]:.3f}, acceptance = {1 - tvs[name]:.3f}"
        _label(ax, f"token (sorted), V = {p.size}", "probability", title, yscale="log", legend=8)
    return fig


def percent(share: float) -> str:
    """A share as a percentage, 2-3 significant digits: 0.0008 -> "0.08%", 0.999 -> "99.9%" (never
    "0%" or "100%" for a share strictly between 0 and 1)."""
    if share == 0:
        return "0%"
    value = 100 * share
    return f"{value:.3g}%" if value >= 10 else f"{value:.2g}%"


def tv_against_viable(
    viable_counts: list[int], top1_masses: list[float], grid: np.ndarray, noise: float
) -> Figure:
    """Mean TV(p, q) of noisy pairs against the number n of viable tokens, one line per mass m of
    the base on token 0 (the other n - 1 tokens get (1 - m)/(n - 1) each, which exceeds m when
    m < 1/n: m is then not the top-1 mass, so the legend does not call it that)."""
    fig, axes = _figure(1)
    ax = axes[0, 0]
    for mass, row in zip(top1_masses, np.asarray(grid)):
        ax.plot(
            viable_counts,
            row,
            marker="o",
            label=f"b(token 0) = {mass:g}, others (1 - {mass:g})/(n - 1)",
        )
    _label(ax, "viable tokens n shared by p and q", "TV(p, q) = 1 - acceptance",
           f"per-token noise {noise:g} (log-normal)", xscale="log", legend=8)
    return fig


def grouping_and_theorem1(
    group_sizes: list[int], tv_by_group: np.ndarray, check: Theorem1Check
) -> Figure:
    """Left: TV(p', q') after rank-binned grouping against G (mean and spread over pairs).
    Right: Theorem 1 drawn: TV after grouping against TV before, random pairs and partitions."""
    fig, axes = _figure(2)
    tv = np.asarray(tv_by_group)
    ax = axes[0, 0]
    ax.plot(
        group_sizes, tv.mean(axis=1), marker="o", color="C0", label=f"mean over {tv.shape[1]} pairs"
    )
    ax.fill_between(
        group_sizes,
        np.quantile(tv, 0.1, axis=1),
        np.quantile(tv, 0.9, axis=1),
        alpha=0.25,
        color="C0",
        label="10%-90% of pairs",
    )
    _label(ax, "G: tokens per bin of the p-ranking", "TV(p', q') = 1 - acceptance",
           "grouping shrinks TV", xscale="log", legend=8)
    ax = axes[0, 1]
    before, after = check.tv_tokens.numpy(), check.tv_clusters.numpy()
    ax.scatter(before, after, s=4, alpha=0.4)
    ax.plot([0, 1], [0, 1], color="k", lw=0.8, label="TV(p', q') = TV(p, q)")
    # The excess TV(p', q') - TV(p, q) of a trial; Theorem 1 says it is <= 0 in every trial.
    title = (f"Theorem 1: max excess TV' - TV = {check.max_violation:.1e}\n"
             f"over {before.size} random pairs and partitions (<= 0: holds)")
    _label(ax, "TV(p, q): tokens", "TV(p', q'): clusters", title, title_size=9, legend=8)
    return fig


def _panel_title(label: str, width: int = 30) -> str:
    """A label that fits a small panel: at most two lines of ``width`` characters (a text prompt
    such as Lumina-mGPT's is shortened with "...")."""
    import textwrap

    return textwrap.fill(textwrap.shorten(label, 2 * width - 12, placeholder="..."), width)


def top1_histograms(stats: Top1Stats, labels: list[str]) -> Figure:
    """Pooled histogram of the top-1 probability (log bins) over all images, then one panel per
    distinct label (e.g. the class an image was generated for: a class's images, one per seed,
    pooled), in first-seen order. The red line is the threshold; titles give the share below it."""
    if len(labels) != stats.per_image.shape[0]:
        raise ValueError(f"{stats.per_image.shape[0]} images but {len(labels)} labels")
    groups = {
        label: [i for i, other in enumerate(labels) if other == label]
        for label in dict.fromkeys(labels)
    }
    ncols = 1 + len(groups)
    cols = min(ncols, 4)
    rows = -(-ncols // cols)
    fig, axes = _figure(cols, rows, size=(3.0, 2.5))
    bins = np.logspace(np.log10(max(stats.pooled.min(), 1e-4)), 0, 30)
    flat_axes = axes.reshape(-1)
    panels = [("all images", stats.pooled, "C0")]
    panels += [
        (label, stats.per_image[rows_of].reshape(-1), "C1") for label, rows_of in groups.items()
    ]
    for ax, (title, values, color) in zip(flat_axes, panels):
        ax.hist(values, bins=bins, color=color)
        ax.axvline(stats.threshold, color="C3", lw=1, label=f"threshold {stats.threshold:g}")
        below = percent(float((values < stats.threshold).mean()))
        _label(ax, "top-1 probability of p", "generated tokens",
               f"{_panel_title(title)}: {below} below", title_size=9, xscale="log")
    flat_axes[0].legend(fontsize=8)
    for ax in flat_axes[ncols:]:
        ax.set_axis_off()
    return fig


def image_grid(
    rows: dict[str, list[np.ndarray]],
    max_columns: int = 8,
    titles: dict[str, str] | None = None,
    columns: list[str] | None = None,
) -> Figure:
    """One row of images per key (e.g. original / top-k / uniform, or AR / SJD / GSD), the key
    (or ``titles[key]``) on the row's left; ``columns``: a label over each column (e.g. the prompt
    and seed its images share), one per shown column."""
    names = list(rows)
    ncols = min(max_columns, max(len(v) for v in rows.values()))
    if columns is not None and len(columns) < ncols:
        raise ValueError(f"{len(columns)} column labels for {ncols} columns")
    fig, axes = _figure(ncols, len(names), size=(1.3, 1.45))
    for r, name in enumerate(names):
        for c in range(ncols):
            ax = axes[r, c]
            ax.set_xticks([])
            ax.set_yticks([])
            if c < len(rows[name]):
                ax.imshow(rows[name][c], interpolation="nearest")
            if c == 0:
                ax.set_ylabel((titles or {}).get(name, name), fontsize=8)
            if r == 0 and columns is not None:
                ax.set_title(columns[c], fontsize=7)
    return fig


# The better direction of every metric a figure plots ("lower" or "higher"); ``better`` raises for
# a metric missing here, so that no panel can name the wrong corner by default.
BETTER: dict[str, str] = {
    "condition_score": "higher",  # stand-in condition-consistency score / CLIP score x100
    "clip_score": "higher",
    "condition_score_diff_ar": "higher",  # a method's score minus AR's
    "frechet_distance": "lower",
    "distortion": "lower",  # mean TV(output law, p) per token
    "w1": "lower",  # mean W1(output law, p) per token, content-distance cost
    "nfe": "lower",
    "speedup_nfe": "higher",
}


def better(key: str) -> str:
    """ "lower" or "higher": the better direction of the plotted metric ``key`` (``BETTER``).
    Raises ValueError for a metric without a declared direction."""
    if key not in BETTER:
        raise ValueError(f"metric {key!r} has no declared better direction: add it to plots.BETTER")
    return BETTER[key]


# Where a point's label may go, tried in order (offset in points, horizontal and vertical
# alignment):
# the first that overlaps no other label, no point and stays inside the panel is taken.
_LABEL_SPOTS = tuple(
    (dx, dy, ha, va)
    for r in (1, 2, 3)
    for dx, dy, ha, va in (
        (4 * r, 3 * r, "left", "bottom"),
        (4 * r, -3 * r, "left", "top"),
        (-4 * r, 3 * r, "right", "bottom"),
        (-4 * r, -3 * r, "right", "top"),
        (0, 5 * r, "center", "bottom"),
        (0, -5 * r, "center", "top"),
    )
)
_LABEL_FONTSIZE = 7


def _zoom_range(points: dict[str, list[dict[str, Any]]]) -> tuple[float, float] | None:
    """The NFE range where the speculative rows crowd: GSD's and MC-GSD's curves to SJD's point,
    widened by 5% (their labels would overlap on the whole range)."""
    crowded = [r["nfe"] for name, rows in points.items() if name == "SJD"
               or name.split(" ")[0] in ("GSD", "MC-GSD") for r in rows]
    if len(crowded) < 2:
        return None
    return min(crowded) / 1.05, max(crowded) * 1.05


def _log_ticks(low: float, high: float) -> list[float]:
    """1-2-5 ticks (..., 10, 20, 50, 100, ...) inside [low, high], at least two when the range
    allows (else its ends)."""
    ticks = [
        m * 10.0**e
        for e in range(int(np.floor(np.log10(low))) - 1, int(np.ceil(np.log10(high))) + 1)
        for m in (1, 2, 5)
    ]
    inside = [t for t in ticks if low <= t <= high]
    return inside if len(inside) >= 2 else [low, high]


def _value_range(rows: list[dict[str, Any]], key: str) -> tuple[float, float] | None:
    values = [
        v
        for r in rows
        if r.get(key) is not None
        for v in (r[key] - (r.get(f"{key}_sem") or 0.0), r[key] + (r.get(f"{key}_sem") or 0.0))
    ]
    return (min(values), max(values)) if values else None


def _place_labels(fig: Figure, requests: list[tuple[Any, str, float, float, str]]) -> None:
    """Annotate each (axes, text, x, y, colour) at the first of ``_LABEL_SPOTS`` where the label
    overlaps no label placed before it and no plotted point, inside its panel (else where it
    overlaps least). Measured in display space once the layout is final."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.font_manager import FontProperties
    from matplotlib.transforms import Bbox

    if not requests:
        return
    canvas = fig.canvas if hasattr(fig.canvas, "get_renderer") else FigureCanvasAgg(fig)
    fig.draw_without_rendering()  # the constrained layout, so that display coordinates are final
    renderer = canvas.get_renderer()
    font = FontProperties(size=_LABEL_FONTSIZE)
    pixels = fig.dpi / 72.0
    taken: dict[Any, list[Any]] = {}
    for ax in {ax for ax, *_ in requests}:  # every plotted point is an obstacle
        taken[ax] = [
            Bbox.from_extents(x - 4, y - 4, x + 4, y + 4)
            for line in ax.get_lines()
            for x, y in ax.transData.transform(np.column_stack(line.get_data()).astype(float))
        ]
    for ax, text, x, y, color in requests:
        px, py = ax.transData.transform((x, y))
        width, height, _ = renderer.get_text_width_height_descent(text, font, ismath=False)
        frame = ax.get_window_extent(renderer)
        best, best_cost = None, np.inf
        for dx, dy, ha, va in _LABEL_SPOTS:
            left = px + dx * pixels - {"left": 0.0, "center": width / 2, "right": width}[ha]
            bottom = py + dy * pixels - (height if va == "top" else 0.0)
            box = Bbox.from_bounds(left, bottom, width, height)
            cost = sum(
                Bbox.intersection(box, other).width * Bbox.intersection(box, other).height
                for other in taken[ax]
                if box.overlaps(other)
            )
            cost += (
                0.0
                if frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)
                else width * height
            )
            if cost < best_cost:
                best, best_cost = (dx, dy, ha, va, box), cost
            if cost == 0:
                break
        dx, dy, ha, va, box = best
        label = ax.annotate(
            text,
            (x, y),
            xytext=(dx, dy),
            textcoords="offset points",
            ha=ha,
            va=va,
            fontsize=_LABEL_FONTSIZE,
            color=color,
        )
        label.set_in_layout(False)  # placed for this layout: it must not change it
        taken[ax].append(box)


def pareto(
    points: dict[str, list[dict[str, Any]]],
    metrics: list[tuple[str, str]],
    references: dict[str, dict[str, Any]] | None = None,
) -> Figure:
    """NFE (x) against each quality metric (y), one line per curve (GSD over G, Amplify over k);
    error bars: +- one standard error over images where the row has ``{metric}_sem``. One row of
    panels per metric: the whole range on a log NFE axis, then a zoom (linear NFE, and the metric's
    range over the points in it) on the range where GSD and SJD crowd, where each point is
    labelled; labels are placed where they overlap no other label and no point (``_place_labels``).
    Each panel names its better corner: fewer forwards (left) and the metric's declared direction
    (``better``: a metric without one raises ValueError). ``references``: named rows without an
    NFE (real images, AR on other seeds), horizontal lines. The legend sits right of each row of
    panels."""
    zoom = _zoom_range(points)
    fig, axes = _figure(2 if zoom else 1, len(metrics), size=(4.6, 3.4))
    labels: list[tuple[Any, str, float, float, str]] = []
    for row_axes, (key, label) in zip(axes, metrics):
        direction = better(key)
        for ax, zoomed in zip(row_axes, (False, True)):
            shown = _pareto_curves(ax, points, key, zoom, zoomed, labels)
            for j, (name, row) in enumerate((references or {}).items()):
                if row is not None and row.get(key) is not None:
                    ax.axhline(row[key], color=f"C{7 + j % 3}", lw=1, ls="--", label=name)
            if zoomed:  # linear NFE over the zoom, the metric's range over the points shown
                ax.set_xlim(*zoom)
                span = _value_range(shown, key)
                if span is not None:
                    pad = 0.08 * (span[1] - span[0]) or 0.05 * abs(span[1]) or 0.01
                    ax.set_ylim(span[0] - pad, span[1] + pad)
                _label(ax, "NFE, zoom on GSD's range", label,
                       "zoom (linear NFE and the points' range)", title_size=9)
            else:  # log NFE with plain tick labels, titled with its better corner
                _log_nfe_axis(ax)
                corner = "down" if direction == "lower" else "up"
                _label(ax, "NFE (forward passes per image, log scale)", label,
                       f"better: {corner}-left (fewer forwards, {direction})", title_size=9)
            if not zoom or zoomed:
                ax.legend(
                    fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0
                )
    _place_labels(fig, labels)
    return fig


_PARETO_MARKERS = {"AR": "s", "SJD": "D", "MC-SJD (maximal)": "^", "MC-SJD (Gumbel)": "v"}


def _pareto_curves(
    ax: Any,
    points: dict[str, list[dict[str, Any]]],
    key: str,
    zoom: tuple[float, float] | None,
    zoomed: bool,
    labels: list[tuple[Any, str, float, float, str]],
) -> list[dict[str, Any]]:
    """Draw each curve's points of ``key`` on ``ax`` (one marker for a single row, a line
    otherwise; error bars from ``{key}_sem``); append the point labels of this panel to
    ``labels``; return the rows shown in this panel (the zoom's range, or all)."""
    shown: list[dict[str, Any]] = []
    for index, (name, rows) in enumerate(points.items()):
        rows = [r for r in rows if r.get(key) is not None]
        if not rows:
            continue
        x = [r["nfe"] for r in rows]
        y = [r[key] for r in rows]
        err = (
            [r.get(f"{key}_sem") or 0.0 for r in rows]
            if any(r.get(f"{key}_sem") for r in rows)
            else None
        )
        style = (
            dict(fmt=_PARETO_MARKERS.get(name, "o"), ms=7, zorder=3)
            if len(rows) == 1
            else dict(fmt="-o")
        )
        ax.errorbar(x, y, yerr=err, capsize=3, color=f"C{index}", label=name, **style)
        in_zoom = [zoom is not None and zoom[0] <= xi <= zoom[1] for xi in x]
        shown += [r for r, inside in zip(rows, in_zoom) if inside == zoomed or not zoom]
        if len(rows) > 1:
            labels += [
                # "G=50": the legend names the curve (", maximal")
                (ax, r["method"].split("(")[-1].rstrip(")").split(",")[0], xi, yi, f"C{index}")
                for r, xi, yi, inside in zip(rows, x, y, in_zoom)
                if zoomed == inside
            ]
    return shown


def _log_nfe_axis(ax: Any) -> None:
    """A log x axis over the plotted range, with 1-2-5 ticks labelled as plain numbers."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    low, high = ax.get_xlim()
    ax.set_xticks(_log_ticks(low, high))
    ax.set_xlim(low, high)


def bars(rows: list[dict[str, Any]], metrics: list[tuple[str, str]]) -> Figure:
    """Horizontal bars per table row, one panel per metric; error bars: the interval
    [``{metric}_low``, ``{metric}_high``] where rows have one (d +- 2 paired SE), else
    +- one standard error over images where the row has ``{metric}_sem`` (set-level metrics such as
    the Frechet distance have none: the panel says so). A label that does not say which way is
    better gets the metric's declared direction (``better``)."""
    fig, axes = _figure(len(metrics), size=(3.6, 0.35 * len(rows) + 1.2))
    labels = [r["method"] for r in rows]
    for i, (ax, (key, label)) in enumerate(zip(axes[0], metrics)):
        if "better" not in label:
            label += f" ({better(key)} better)"
        values = [r.get(key) if r.get(key) is not None else np.nan for r in rows]
        if any(r.get(f"{key}_low") is not None for r in rows):
            # An interval [low, high] (e.g. d +- 2 paired SE against AR).
            errors = np.array(
                [
                    [v - r[f"{key}_low"], r[f"{key}_high"] - v]
                    if r.get(f"{key}_low") is not None
                    else [0.0, 0.0]
                    for r, v in zip(rows, values)
                ]
            ).T
            has_errors = True
        else:
            errors = [r.get(f"{key}_sem") or 0.0 for r in rows]
            has_errors = any(r.get(f"{key}_sem") for r in rows)
        ax.barh(
            range(len(rows)),
            values,
            xerr=errors if has_errors else None,
            capsize=2,
            color=[f"C{j % 10}" for j in range(len(rows))],
        )
        if key.endswith("_diff_ar"):
            ax.axvline(0.0, color="k", lw=0.8)
        if not has_errors and key != "speedup_nfe" and key != "nfe":
            label += "\n(one set-level value: no error bar)"
        ax.set_yticks(range(len(rows)), labels if i == 0 else [""] * len(rows), fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(label)
    return fig


def distortion(cluster_sizes: list[int], curves: dict[str, np.ndarray], ylabel: str) -> Figure:
    """Exact per-step quantities (distortion TV(out, p) or acceptance) against the cluster size:
    the number of tokens in a cluster G (``toy.rules_for_cluster_size``: a dynamic window of G
    ranks, rank bins of G tokens), so the rules are compared at equal size."""
    fig, axes = _figure(1)
    ax = axes[0, 0]
    for name, values in curves.items():
        ax.plot(cluster_sizes, np.asarray(values), marker="o", label=name)
    _label(ax, "G: tokens per cluster (1 = plain SD)", ylabel, legend=8)
    return fig


W1_LABEL = "W1(output law, p) per token\n(RMS content distance)"


def distortion_vs_nfe(points: dict[str, list[dict[str, Any]]], w1_label: str = W1_LABEL) -> Figure:
    """The exact distortion (mean over images of the per-token TV(one-step output law, p)) against
    NFE, one line per rule and its sweep (GSD over G, rank bins, Amplify over k, LANTERN over
    delta); AR and SJD are lossless points at 0. A second panel: the similarity-aware W1 (mean
    per-token W1 with the codes' content distance as ground cost, ``accounting.transport``) where
    the rows carry it. Error bars: +- one standard error over images."""
    metrics = [("distortion", "exact distortion:\nmean TV(output law, p) per token")]
    if any(r.get("w1") is not None for rows in points.values() for r in rows):
        metrics.append(("w1", w1_label))
    return pareto(points, metrics)


LOSSLESS_MARKERS = ("*", "P", "X", "D", "h", "^", "v", "p")  # one per lossless decoder, in grey


def frontier(curves: dict[str, list[dict[str, Any]]],
             lossless: list[dict[str, Any]] = ()) -> Figure:
    """The frontier (``experiments.frontier``): NFE (y) against the mean TV per token (left)
    and the mean W1 per token (right, rows that carry it), one line per rule's curve, a marker
    per single configuration; error bars +- one standard error over images on both axes. Lower
    is better on both axes: the better corner is down-left. ``lossless``: rows of
    ``experiments.lossless_frontier`` (no W1 measured), grey markers at their largest measured
    TV."""
    fig, axes = _figure(2, size=(5.0, 3.8))
    panels = [
        ("distortion", "mean TV(output law, p) per token"),
        ("w1", "mean " + W1_LABEL.replace("\n", " ")),
    ]
    for ax, (key, label) in zip(axes[0], panels):
        for index, (name, rows) in enumerate(curves.items()):
            rows = [r for r in rows if r.get(key) is not None]
            if not rows:
                continue
            ax.errorbar(
                [r[key] for r in rows],
                [r["nfe"] for r in rows],
                xerr=[r.get(f"{key}_sem") or 0.0 for r in rows],
                yerr=[r.get("nfe_sem") or 0.0 for r in rows],
                fmt="-o" if len(rows) > 1 else "s",
                ms=5 if len(rows) > 1 else 7,
                capsize=3,
                color=f"C{index % 10}",
                label=name,
            )
        for index, row in enumerate(lossless if key == "distortion" else ()):
            marker = LOSSLESS_MARKERS[index % len(LOSSLESS_MARKERS)]
            ax.plot([row["distortion_max"]], [row["nfe"]], marker, ms=8, color="0.2",
                    fillstyle="none", label=f"{row['method']} (lossless)")
        # two lines: side by side, the panels' one-line labels overlapped
        ax.set_xlabel(f"{label}\n({better(key)} better)", fontsize=9)
        ax.set_ylabel(f"NFE per image ({better('nfe')} better)")
        ax.set_title("better: down-left (fewer forwards, lower distortion)", fontsize=9)
    _legend_right(fig, axes)
    return fig


def pareto_line(sets: dict[str, dict[str, tuple[Any, Any]]]) -> Figure:
    """The one-step Pareto line (``experiments.frontier``): per set of rows (a panel), every
    rule's rows at (TV(out, p), acceptance gained over SD = acceptance - (1 - T)); no rule can lie
    above the line gain = TV (proofs/10), the TV-optimal relaxation lies on it."""
    fig, axes = _figure(len(sets), size=(4.4, 3.6))
    markers = "os^vDPX*<>"
    for ax, (title, points) in zip(axes[0], sets.items()):
        top = 0.0
        for index, (name, (tv, gain)) in enumerate(points.items()):
            tv, gain = np.asarray(tv).ravel(), np.asarray(gain).ravel()
            top = max(top, float(tv.max(initial=0.0)), float(gain.max(initial=0.0)))
            ax.scatter(tv, gain, s=14, marker=markers[index % len(markers)], alpha=0.6,
                       color=f"C{index % 10}", label=name)
        ax.plot([0, top], [0, top], color="black", lw=1, ls="--",
                label="the line: gain = TV (1 - T + TV)")
        _label(ax, f"TV(output law, p) per step ({better('distortion')} better)",
               "acceptance - SD's (1 - T) (higher better)",
               f"{title}: above the line is impossible", title_size=9)
    _legend_right(fig, axes)
    return fig


def png(fig: Figure, dpi: int = 100) -> bytes:
    """``fig`` as PNG bytes, cropped to its content."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return buffer.getvalue()


def show(fig: Figure, dpi: int = 100) -> None:
    """Display ``fig`` in a notebook as a PNG only (no text repr such as ``<Figure size ...>``,
    which changes between matplotlib versions and would break output checks)."""
    from IPython.display import display

    display({"image/png": png(fig, dpi)}, raw=True)
