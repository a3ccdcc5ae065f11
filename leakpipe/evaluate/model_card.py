"""The model card: what an evaluated detector is for, what it was trained on, how good it is on
test and under which conditions, how it fared on real recordings, and where it must not be
trusted. `leakpipe evaluate` writes the card of its `cnn` detector to ``reports/model_card.md``;
`leakpipe ship` makes the card of the shipped detector, of whichever kind (this one for `cnn`,
``leakpipe.evaluate.stats_card`` for `logger_stats`, ``leakpipe.evaluate.fused_card`` for
`fused`), the registered version's description;
`leakpipe promote` prints the cards of both versions it compares.

A crew digs on a LEAK call: the card is the one page that says how far that call can be taken.
Its per-condition figures (pipe material, sensor, native sample rate: the manifest's columns
where it has them) each carry their number of recordings, because a figure over five recordings
is an anecdote, and a condition the test split lacks is simply absent, never extrapolated.
A card quotes only figures of its own detector: the sim-to-real report (a benchmark scores
whichever detector file it is given, usually the one before this evaluation) is quoted only when
it names this detector file's sha256 (``CardInputs.detector_sha``); otherwise the section says
the report is not of this detector and quotes none of its figures. The operating point is given
on the scale predict, the served detector and explain show (``leak_prob``, 4 digits), the rule's
raw score labelled as such. The card file is built from the evaluation alone (no clock, no
host, no MLflow run id, no absolute path), so the same data and code give the same bytes and
DVC sees no change where there is none. What only the tracking store can say (the id of the
train run that wrote the network) goes into the registered version's description alone:
``registry_description``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath

import numpy as np

from leakpipe.data.manifest import manifest_of
from leakpipe.errors import DataError
from leakpipe.evaluate.bootstrap import rate_intervals
from leakpipe.evaluate.registration import TEST_FIGURES, figure_text, network_text

CONDITIONS = (("material", "pipe material"), ("sensor", "sensor"),
              ("sample_rate", "native sample rate (Hz)"))
MAX_ROWS = 12                # values shown per condition (the most recordings first)
FEW_RECORDINGS = 20          # below this a condition's figures are flagged as anecdotal
CALIBRATION_FIGURES = (("expected calibration error", "ece"), ("Brier score", "brier"))


@dataclass(frozen=True)
class CardInputs:
    """What the card says, gathered by the evaluate stage."""

    network: object              # leakpipe.detector.Network
    metrics: Mapping[str, float]
    rule: str
    threshold: float             # on the rule's raw score
    prob_threshold: float        # the same threshold as a calibrated leak_prob
    criterion: str
    confidence: float
    model_sha: str
    test_sha: str
    training: str                # registration.training_text
    source: str                  # build.source, as params.yaml names it
    truth: np.ndarray            # (F,) bool per test clip
    decision: np.ndarray         # (F,) bool
    recording_ids: np.ndarray    # (F,) str
    groups: np.ndarray           # (F,) str: sites
    conditions: Mapping[str, Mapping[str, str]]   # recording_id -> {column: value}
    sim_to_real: Mapping | None  # benchmarks/studies/sim_to_real.py's JSON, or None
    sim_to_real_path: str = ""
    train_run: str | None = None  # MLflow id of the network's train run: registry only
    detector_sha: str = ""       # sha256 of the detector file this card describes ("": not
    #                              known, so no other report can be shown to be of it)


def manifest_conditions(source: Path) -> dict[str, dict[str, str]]:
    """recording_id -> the condition columns the manifest of ``source`` has (empty values
    left out); {} for class folders without a manifest or a manifest without such columns."""
    try:
        path = manifest_of(Path(source))
    except DataError:
        return {}
    if path is None:
        return {}
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        columns = [c for c, _ in CONDITIONS if c in (reader.fieldnames or [])]
        return {row["path"].strip(): {c: row[c].strip() for c in columns if (row[c] or "").strip()}
                for row in reader if columns}


def model_card(card: CardInputs) -> str:
    """The card as Markdown: the bytes of reports/model_card.md (a DVC output). Nothing that
    differs between two runs on the same data and code enters it (``card.train_run`` does not)."""
    parts = [_head(card), intended_use(), _model(card), _data(card), _test(card),
             _per_condition(card), _sim_to_real(card), _limits(card)]
    return "\n\n".join(p.rstrip() for p in parts) + "\n"


def registry_description(card_text: str, train_run: str | None) -> str:
    """The registered version's description: the card's text (``model_card``), then the run
    that trained the network. A registry version is one run's record, so its run ids belong
    there and not in the file; without a known train run it is the card alone."""
    if not train_run:
        return card_text
    return (card_text + "\n## Provenance (registry only)\n\n"
            f"- MLflow train run of this network: `{train_run}` (kept out of "
            "reports/model_card.md, whose bytes depend on the data and code alone).\n")


def shown_path(path: str) -> str:
    """``path`` as the card shows it: a relative path as given; an absolute one (a machine's
    own, e.g. the detector a benchmark scored) as ``.../<folder>/<file>``, its last two parts,
    so that the card reads the same on every machine and in every checkout."""
    pure = PurePath(path)
    if not pure.is_absolute():
        return path
    return ".../" + "/".join(pure.parts[1:][-2:])


def _head(card: CardInputs) -> str:
    return (f"# Model card: leak detector {card.model_sha[:12]}\n\n"
            "Written by `leakpipe evaluate` from its own evaluation (reports/model_card.md, and "
            "the registered version's description).")


def intended_use() -> str:
    return ("## Intended use\n\n"
            "Screening recordings of pressurised water pipes (hydrophones, accelerometers, noise "
            "loggers) for the broadband, stationary noise of escaping water, so that a survey "
            "crew knows which pipes to check first. A LEAK call is a reason to listen again "
            "(ground microphone, correlator), not a location and not a reason to dig on its "
            "own. `leak_prob` is calibrated on the val split's recordings; on a recording the "
            "domain check calls `shifted` (verdict UNCERTAIN) it is the model's answer, not a "
            "probability: measure the detector there first (`leakpipe cv`).")


def _model(card: CardInputs) -> str:
    return ("## Model\n\n"
            f"- {network_text(card.network)}; input normalisation "
            f"`{card.network.input_norm}`; network file sha256 {card.model_sha[:12]}.\n"
            f"- Operating point: rule `{card.rule}`, threshold {card.prob_threshold:.4f} on "
            f"`leak_prob` (raw rule score {card.threshold:.4f}), chosen on the val split by "
            f"{card.criterion}: a recording is LEAK when its `leak_prob` reaches it.")


def _data(card: CardInputs) -> str:
    sites = len(np.unique(card.groups))
    recordings = len(np.unique(card.recording_ids))
    return ("## Data\n\n"
            f"- Source: `{card.source}` (params.yaml `build.source`); {card.training}.\n"
            f"- Test split: file sha256 {card.test_sha[:12]}, {len(card.truth)} clips of "
            f"{recordings} recordings at {sites} sites, sites disjoint from train and val "
            f"({int(card.truth.sum())} LEAK clips, {int((~card.truth).sum())} others).")


def _test(card: CardInputs) -> str:
    m = card.metrics
    rows = [f"| {label} | {figure_text(m, f'test/{key}')} |" for label, key in TEST_FIGURES]
    rows += [f"| {label} | {_plain(m.get(f'test/{key}'))} (uncalibrated "
             f"{_plain(m.get(f'test/{key}_uncalibrated'))}) |"
             for label, key in CALIBRATION_FIGURES]
    return ("## Test figures (per clip)\n\n"
            f"{card.confidence:.0%} intervals resampling recordings; Wilson intervals for "
            "sensitivity and specificity.\n\n| figure | value [interval] |\n|---|---|\n"
            + "\n".join(rows))


def _per_condition(card: CardInputs) -> str:
    return per_condition_section(card.truth, card.decision, card.recording_ids,
                                 card.conditions, card.confidence, "clip")


def per_condition_section(truth: np.ndarray, decision: np.ndarray, recording_ids: np.ndarray,
                          conditions: Mapping[str, Mapping[str, str]], confidence: float,
                          unit: str) -> str:
    """``## Per condition (test split)``: sensitivity and specificity per pipe material, sensor
    and native rate of the test ``unit``s (clips or recordings: (N,) truth, decision and their
    recording ids), with Wilson intervals over recordings; every kind's card has it."""
    head = "## Per condition (test split)\n\n"
    ids = np.asarray(recording_ids).astype(str)
    of_unit = [conditions.get(r, {}) for r in ids]
    tables = [_condition_table(np.asarray(truth, bool), np.asarray(decision, bool), ids,
                               confidence, of_unit, column, label)
              for column, label in CONDITIONS if any(column in c for c in of_unit)]
    if not tables:
        return head + ("No manifest with `material`, `sensor` or `sample_rate` columns: no "
                       "per-condition figures.")
    return head + (f"Sensitivity and specificity per {unit} with {confidence:.0%} Wilson "
                   "intervals over recordings; n = recordings (LEAK / other). Rows with fewer "
                   f"than {FEW_RECORDINGS} recordings are marked *: read them as anecdotes.\n\n"
                   + "\n\n".join(tables))


def _condition_table(truth_all: np.ndarray, decision_all: np.ndarray, ids_all: np.ndarray,
                     confidence: float, of_unit: Sequence[Mapping[str, str]], column: str,
                     label: str) -> str:
    values = np.array([c.get(column, "unknown") for c in of_unit])
    counts = {v: len(np.unique(ids_all[values == v])) for v in np.unique(values)}
    order = sorted(counts, key=lambda v: (-counts[v], v))
    lines = [f"| {label} | n | sensitivity | specificity |", "|---|---|---|---|"]
    for value in order[:MAX_ROWS]:
        rows = values == value
        truth, decision, ids = truth_all[rows], decision_all[rows], ids_all[rows]
        cis = rate_intervals(truth, decision, ids, confidence)
        leak_n = len(np.unique(ids[truth]))
        other_n = len(np.unique(ids[~truth]))
        mark = " *" if counts[value] < FEW_RECORDINGS else ""
        lines.append(f"| {value}{mark} | {counts[value]} ({leak_n} / {other_n}) | "
                     f"{_rate(decision[truth], cis.get('recall'))} | "
                     f"{_rate(~decision[~truth], cis.get('specificity'))} |")
    if len(order) > MAX_ROWS:
        lines.append(f"| ... {len(order) - MAX_ROWS} more values | | | |")
    return "\n".join(lines)


def _sim_to_real(card: CardInputs) -> str:
    head = "## Real recordings (sim-to-real)\n\n"
    report = card.sim_to_real
    if not report:
        return head + ("Not measured for this card (`evaluate.sim_to_real` is empty or its "
                       "file is absent): `python benchmarks/studies/sim_to_real.py` scores real "
                       "recordings with a detector and writes the figures this section shows.")
    overall = report.get("zero_shot", {}).get("overall", {})
    det = report.get("detector", {})
    scored = str(det.get("sha256") or "")
    if not (card.detector_sha and scored == card.detector_sha):
        named = f"sha256 {scored[:12]}" if scored else "no sha256"
        return head + (f"Not measured for this detector: `{shown_path(card.sim_to_real_path)}` "
                       f"scored the detector file then at "
                       f"`{shown_path(str(det.get('path', '?')))}` ({named}), not shown to be "
                       "this one, and a card quotes only its own detector's figures. Run "
                       "`python benchmarks/studies/sim_to_real.py` on this detector file to "
                       "measure it.")
    ci = overall.get("roc_auc_ci") or [math.nan, math.nan]
    return head + (f"From `{shown_path(card.sim_to_real_path)}`, which scored this detector "
                   f"file (sha256 {scored[:12]}, input_norm `{det.get('input_norm', '?')}`). "
                   "Zero-shot clip ROC-AUC "
                   f"{_plain(overall.get('roc_auc'))} [{_plain(ci[0])}, {_plain(ci[1])}], "
                   f"balanced accuracy {_plain(overall.get('balanced_accuracy'))}, sensitivity "
                   f"{_plain(overall.get('recall'))}, specificity "
                   f"{_plain(overall.get('specificity'))} over {overall.get('n_clips', '?')} "
                   f"clips of {len(report.get('recordings', {}))} real recordings. "
                   f"{_sentence(overall.get('ci_note', ''))}".rstrip())


def _limits(card: CardInputs) -> str:
    f = card.network.features
    return ("## Known limits\n\n"
            "- The test figures hold for recordings like the test split's: the same source, "
            "network and loggers, at sites the detector has not seen. On another network expect "
            "less (published cross-network studies and this project's real-recording checks "
            "find detectors near chance there): measure it with grouped cross-validation on "
            "that network's own recordings (`leakpipe cv`) before acting on the calls.\n"
            f"- The model reads {f.sample_rate} Hz audio, {f.n_mels} mel bands up to "
            f"{f.fmax:g} Hz: a recording sampled below {2 * f.fmax:g} Hz leaves the bands above "
            "its Nyquist frequency empty; predict marks it `band_limited`.\n"
            "- Loudness depends on sensor, gain and coupling: a detector that weighs level "
            "(`model.level_input`, input normalisation) carries that into another sensor's "
            "recordings.\n"
            "- A sensor mount or fitting that rings in the leak band makes a recording without "
            "a leak look like one with a leak, which the training recordings hold: in the "
            "project's benchmark (`benchmarks/studies/field_resonance.py`) such a resonance "
            "raised the "
            "default detector's false-alarm rate about fourfold while no single recording was "
            "marked `shifted`. Check a network's recordings as a set: predict writes the set "
            "domain check beside its CSV (`<out stem>_domain.json`).\n"
            "- Sites, not clips, are the independent units: the intervals resample recordings, "
            "and with few sites per condition a per-condition figure can move a lot.")


def _rate(right: np.ndarray, interval: object) -> str:
    if not len(right):
        return "n/a"
    value = float(np.mean(right))
    if interval is None:
        return f"{value:.3f}"
    return f"{value:.3f} [{interval.low:.3f}, {interval.high:.3f}]"


def _sentence(text: str) -> str:
    """``text`` as a sentence: capitalised, ending in a full stop ("" stays "")."""
    text = text.strip()
    if not text:
        return ""
    return text[0].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _plain(value: object) -> str:
    if isinstance(value, (int, float)) and math.isfinite(value):
        return f"{value:.3f}"
    return "n/a"
