"""`leakpipe predict`: leak decisions for new recordings with a saved detector of any kind.

Modules, lowest first: ``rows`` (the output rows and the CSV / JSON files they go to),
``inputs`` (the recordings selected, read and checked: the one input path predict, explain
and serve share), ``target`` (where the rows go, which detector wrote them), ``rules`` (a CNN's
batch caps and signal checks), ``scoring`` (a CNN's recordings scored a batch at a time,
files or waveforms in memory), ``clips`` (a CNN's predict loop), ``stats`` (the loop of one
verdict per recording, and a logger_stats detector's rows), ``fused`` (a fused detector's
rows), ``run`` (the command: ``run_predict``). Nothing is imported here.
"""
