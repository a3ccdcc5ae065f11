"""The explanation figure of one recording, four panels over one time axis plus the bands.

1. waveform level (dBFS) over time;
2. the log-mel spectrogram as the network sees it (mean of each long segment), bands in Hz;
   right of panels 1-2 the text summary: the verdict, the model's call, ``leak_prob`` and
   ``threshold`` on predict's one scale, the domain check, the raw rule score and threshold,
   votes, the band groups that pushed towards LEAK and towards NOLEAK most (and whether
   occluding one alone flips the call);
3. occlusion map: for each band group and each long segment, how much its leak probability
   drops when the group is occluded (red: the group pushed that segment towards LEAK, blue:
   away); right of it, the drop of the recording's raw rule score per group (the bars sum up
   the map through the rule);
4. the long-segment probabilities (the network's, uncalibrated: the votes) against the raw rule
   threshold they vote on, those at or above it in red.

The title says what predict's row says: the verdict, ``leak_prob``, ``threshold`` (both on the
calibrated scale) and, for a shifted recording, the domain reason.

Long segments of neighbouring clips may overlap in time (predict spreads clips evenly from
start to end); they come in time order (``recording``), and each cell is drawn as wide as the
distance to its neighbours.
"""

from __future__ import annotations

import textwrap

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from leakpipe.decision.domain import SHIFTED
from leakpipe.explain.recording import Explanation

FIGURE_SIZE = (12.0, 10.0)
TITLE_POINTS = 11
# a character's mean advance in DejaVu Sans (matplotlib's default) is about 0.55 em; 0.62
# leaves room for runs of wide capitals (UNCERTAIN, LEAK)
TITLE_CHAR_EM = 0.62
TOP_GROUPS = 3              # groups named in the summary and labelled on the bars


def explanation_figure(ex: Explanation) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    det = ex.detector
    fig = Figure(figsize=FIGURE_SIZE, layout="constrained")
    grid = fig.add_gridspec(4, 3, width_ratios=[6.0, 0.15, 1.7], height_ratios=[1, 1.7, 1.4, 1.3])
    level_ax = fig.add_subplot(grid[0, 0])
    mel_ax = fig.add_subplot(grid[1, 0], sharex=level_ax)
    map_ax = fig.add_subplot(grid[2, 0], sharex=level_ax, sharey=mel_ax)
    prob_ax = fig.add_subplot(grid[3, 0], sharex=level_ax)
    bar_ax = fig.add_subplot(grid[2, 2], sharey=mel_ax)
    text_ax = fig.add_subplot(grid[0:2, 2])

    centres = ex.long_starts_s + det.features.long_window_s / 2                # (N,)
    edges = _cell_edges(centres, det.features.long_hop_s)                      # (N + 1,)

    level_edges = np.append(ex.level.starts_s, ex.level.starts_s[-1:] + ex.level.window_s)
    level_ax.stairs(ex.level.dbfs, level_edges, color="0.3", linewidth=0.8, baseline=None)
    level_ax.set(ylabel="level (dBFS)")
    fig.suptitle(title(ex.path.name, ex.shown, FIGURE_SIZE[0], TITLE_POINTS),
                 fontsize=TITLE_POINTS)

    n_mels = ex.band_db.shape[0]
    mesh = mel_ax.pcolormesh(edges, np.arange(n_mels + 1), ex.band_db,
                             cmap="magma", shading="flat")
    fig.colorbar(mesh, cax=fig.add_subplot(grid[1, 1]))
    mel_ax.set(ylabel="mel band (Hz)")
    mel_ax.set_title("log-mel (dB) of each long segment, as the network sees it",
                     fontsize="small", loc="left")
    _band_ticks(mel_ax, ex)

    group_edges = np.array([g.first for g in ex.groups] + [n_mels])
    limit = max(float(np.abs(ex.long_drop).max()), 1e-6)
    drop_mesh = map_ax.pcolormesh(edges, group_edges, ex.long_drop, cmap="RdBu_r",
                                  vmin=-limit, vmax=limit, shading="flat")
    fig.colorbar(drop_mesh, cax=fig.add_subplot(grid[2, 1]))
    map_ax.set(ylabel="occluded bands (Hz)")
    map_ax.set_title(f"drop of each long segment's leak probability with the bands set to the "
                     f"{ex.fill} ({ex.fill_db:.0f} dB): red = pushed towards LEAK, blue = away",
                     fontsize="small", loc="left")
    _draw_bars(bar_ax, ex, group_edges)

    over = ex.long_probs >= det.threshold
    prob_ax.plot(centres, ex.long_probs, color="0.4", linewidth=0.8)
    prob_ax.scatter(centres[~over], ex.long_probs[~over], s=10, color="C0",
                    label="below threshold")
    prob_ax.scatter(centres[over], ex.long_probs[over], s=14, color="C3",
                    label="at or above (votes LEAK)")
    prob_ax.axhline(det.threshold, color="C3", linestyle="--", linewidth=1.0,
                    label=f"raw rule threshold {det.threshold:.4f}")
    prob_ax.set(xlabel="time (s)", ylabel="long-segment probability\n(raw, uncalibrated)",
                ylim=(-0.02, 1.02),
                xlim=(min(edges[0], 0.0), max(edges[-1], ex.duration_s)))
    prob_ax.legend(loc="best", fontsize="small", ncols=3)

    text_ax.axis("off")
    text_ax.text(0.0, 1.0, _summary(ex), va="top", ha="left", family="monospace",
                 fontsize="small", transform=text_ax.transAxes)
    return fig


def _cell_edges(centres: np.ndarray, hop: float) -> np.ndarray:
    """Edges of one cell per centre (sorted): midway between neighbours, half a hop outside."""
    if len(centres) == 1:
        return np.array([centres[0] - hop / 2, centres[0] + hop / 2])
    middle = (centres[1:] + centres[:-1]) / 2
    return np.concatenate([[centres[0] - hop / 2], middle, [centres[-1] + hop / 2]])


def _band_ticks(ax: Axes, ex: Explanation) -> None:
    """Ticks at the band groups' lower edges, labelled with their lowest band's centre."""
    step = max(1, len(ex.groups) // 8)
    shown = ex.groups[::step]
    ax.set_yticks([g.first for g in shown], [f"{g.low_hz:.0f}" for g in shown])


def _draw_bars(ax: Axes, ex: Explanation, group_edges: np.ndarray) -> None:
    drops = ex.drops
    centres = (group_edges[:-1] + group_edges[1:]) / 2
    heights = np.diff(group_edges) * 0.85
    ax.barh(centres, drops, height=heights, color=np.where(drops > 0, "C3", "C0"))
    ax.axvline(0.0, color="0.3", linewidth=0.8)
    for g in [*ex.towards_leak[:TOP_GROUPS], *ex.towards_noleak[:TOP_GROUPS]]:
        right = drops[g] > 0
        ax.annotate(ex.groups[g].label, (drops[g], centres[g]), fontsize="x-small",
                    xytext=(2 if right else -2, 0), textcoords="offset points", va="center",
                    ha="left" if right else "right")
    ax.set(xlabel="drop of the recording's raw\nrule score when occluded")
    ax.tick_params(labelleft=False)


def call_text(call: dict) -> str:
    """The call as predict's row says it (``Explanation.shown``, or a logger_stats / fused
    explanation's ``call``): ``UNCERTAIN (leak_prob 0.9897, threshold 0.5142; the model's call
    LEAK; domain shifted: level: ...)``: the verdict, leak_prob and threshold on one scale, and
    a shifted recording's reason."""
    text = (f"{call['verdict']} (leak_prob {call['leak_prob']:.4f}, threshold "
            f"{call['threshold']:.4f}")
    if call["verdict"] != call["decision"]:
        text += f"; the model's call {call['decision']}"
    if call.get("domain") == SHIFTED:
        text += f"; domain shifted: {call['domain_reason']}"
    return text + ")"


def title(name: str, call: dict, width_in: float, fontsize: float) -> str:
    """A figure's title: ``call_text`` (the verdict first), then the recording's name, wrapped
    to lines that fit ``width_in`` inches at ``fontsize`` points, so that neither the verdict
    nor the name runs off the image whatever a shifted recording's reason says."""
    chars = max(20, int(width_in * 72 / (TITLE_CHAR_EM * fontsize)))
    return "\n".join(textwrap.wrap(f"{call_text(call)}  {name}", chars,
                                    break_long_words=True, break_on_hyphens=False))


def _summary(ex: Explanation) -> str:
    det, call = ex.detector, ex.shown
    n_over = int((ex.long_probs >= det.threshold).sum())
    lines = [f"verdict    {call['verdict']}", f"call       {call['decision']}",
             f"leak_prob  {call['leak_prob']:.4f}", f"threshold  {call['threshold']:.4f}",
             f"domain     {call['domain']}", "",
             f"raw rule score {ex.raw_score:.4f}", f"raw threshold  {det.threshold:.4f}",
             f"rule       {det.voting.rule}",
             f"long segs  {n_over} of {len(ex.long_probs)} >= raw thr."]
    if det.voting.rule == "long_vote":
        lines.append(f"           ({ex.votes_needed} needed)")
    for head, groups in (("towards LEAK (raw score drop", ex.towards_leak),
                         ("towards NOLEAK (raw score drop", ex.towards_noleak)):
        lines += ["", f"{head}", " when occluded):"]
        for g in groups[:TOP_GROUPS]:
            flips = (ex.scores_without[g] >= det.threshold) != (ex.raw_score >= det.threshold)
            lines.append(f" {ex.groups[g].label:>14} {ex.drops[g]:+.3f}"
                         f"{'  flips' if flips else ''}")
        if not groups:
            lines.append("  none")
    if ex.notes:
        lines += ["", ex.notes[:60]]
    return "\n".join(lines)
