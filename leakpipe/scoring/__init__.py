"""The one scoring path: a network over batches of whole files -> per-segment outputs.

Per-epoch validation in training, the evaluate stage, `leakpipe predict` and the sim-to-real
check all score through ``score.score_batches``, so a detector's numbers cannot depend on which
of them ran it. ``batching`` sizes and opens those batches (memory budget, placement).
"""
