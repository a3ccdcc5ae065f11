"""`leakpipe explain`: why the detector called a recording LEAK or not, as numbers and a figure.

Time: the long-segment leak probabilities (the votes) against the threshold, beside the
recording's waveform level. Frequency: band occlusion: each group of adjacent mel bands is set
to the recording's floor (or median) level, the recording is scored again through predict's
path, and the drop of the rule's score is that group's share in the call (per long segment
too). Occlusion needs no gradient and no extra package, works for every rule (a vote has no
useful gradient), and means what it says: "without the energy in these bands the score would
be this".

Modules: ``occlusion`` (band groups, fill level, the occluded features: pure numpy),
``level`` (the waveform level over time), ``recording`` (one recording's explanation through
``leakpipe.predict``'s reading and scoring), ``figure`` (the PNG), ``stats`` and ``fused``
(the exact, linear explanations of a logger_stats and a fused detector's call: each statistic's,
each part's share of the logit), ``stage`` (``run_explain``: the command).
"""
