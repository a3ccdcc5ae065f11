"""The detector as an MLflow model: recordings in, `leakpipe predict`'s rows out.

Stage `ship` logs the shipped detector (``models/shipped.pt``, of whichever kind grouped CV
selected) as an MLflow pyfunc model (``log_served_detector``) and registers it as the
``candidate`` (evaluate logs its CNN detector the same way, unregistered), so
``mlflow models serve -m models:/leakpipe-detector@champion --env-manager local`` answers a
client with recording decisions, not segment scores: for a `cnn` detector the same
segmentation, voting, threshold and rule as `leakpipe predict`, through the same code
(``predict.scoring.score_recordings``); for a `logger_stats` detector the same statistics and signal
checks as predict's (``stats_detector.measure``), one verdict per recording; for a `fused`
detector the same one decoding into the CNN part's clips and the statistics, stacked, as
predict's (``predict.fused.measure_fused``), one verdict per recording.

The model is logged "from code": MLflow runs ``serve/model_code.py`` at load time, which builds
a ``DetectorModel`` around the detector file (an artifact of the model). No pickled Python
object is stored, and the leakpipe package travels with the model (``code_paths``), so it loads
wherever its pinned requirements are installed.

Input, one row per recording (``INPUT_SCHEMA``): ``waveform``, the samples as a list of numbers
(mono, full scale = 1: a client mixes channels down and reads PCM as float, as soundfile's
``dtype="float32"`` does), ``sample_rate`` in Hz (any whole number of Hz: a `cnn` detector
resamples to its model's, a `logger_stats` one measures at that rate, a `fused` one both;
``4096.5`` or ``"8k"`` is refused as sent, not cast), and an optional ``id`` echoed back
(default ``recording-<row>``). File paths are not accepted: a served model would then read files
on the server's disk for whoever asks; files are `leakpipe predict`'s input.

Output, one row per recording in input order, the same columns for every kind: ``id`` and then
predict's columns of every kind (a `cnn` detector's: ``status``, ``verdict``, ``leak_prob``,
``decision``, ``threshold``, ``rule``, ``prob_mode``, ``vote_fraction``, ``frac_long_over``,
``n_long``, ``duration_s``, ``band_hz``, ``band_limited``, ``domain``, ``domain_distance``,
``domain_reason``, ``long_starts_s``, ``long_clips``, ``long_probs``, ``notes``; then those of
the kinds of one verdict per recording: ``raw_score``, ``kind``, ``sample_rate``,
``top_statistic``), the timeline as three lists in time order (each long segment's start in
seconds, its clip, its probability). Each row is made by the code that makes predict's row of
its kind, so every column of predict's CSV has the value predict writes for the same recording;
``kind`` is filled for every kind, and a column a kind does not have is null (or "", or []).
``leak_prob`` and ``threshold`` are on one scale, as predict's CSV shows them (4 digits;
``decision``, the model's call, is LEAK exactly when ``leak_prob`` reaches ``threshold``);
``verdict`` is LEAK, NOLEAK, UNCERTAIN (``domain`` shifted: ``notes`` say why and what to do)
or UNUSABLE (no call). A `logger_stats` detector has no segments: its ``rule`` is
``logger_stats``, ``prob_mode`` is "", ``vote_fraction``, ``frac_long_over`` and ``n_long`` are
null and the timeline lists empty; ``band_hz`` is the recording's own Nyquist frequency,
``band_limited`` says a statistic it reads is missing at that rate, and its domain check is
that of its statistics (``decision.stats_domain``). A `fused` detector leaves the same columns
empty (``rule`` ``fused``); its ``band_limited`` and domain check are both parts'
(``serve.fused``). A recording that cannot be used (too short, non-finite
samples, a bad rate) gets ``status`` "error" and its reason in ``notes``; one whose signal fails
build's checks as the detector's `build.quality` refuses them (a dead, constant channel always,
for every kind) gets ``status`` "unusable", no ``decision`` and no ``leak_prob``: a silent
logger never reads as "no leak". The others are still answered; a check that only flags a
recording is in its ``notes``. A request's recordings are also checked as a set, as predict
checks a folder (``request.with_request_set``): when they are, taken together, farther from the
training recordings than its val recordings were, every call reads UNCERTAIN.

Modules: ``model`` (``DetectorModel``, the schema and input example, ``log_served_detector``;
the scorer of each kind comes from its ``DetectorKind.serve_scorer``), ``request`` (a
request's rows as recordings, an answer's rows as JSON), ``cnn``, ``stats`` and ``fused``
(each kind's scorer), ``model_code`` (what MLflow runs at load time), ``server`` (`leakpipe
serve`). Nothing is imported here: `leakpipe serve`'s argument parsing must not load MLflow's
pyfunc machinery.
"""
