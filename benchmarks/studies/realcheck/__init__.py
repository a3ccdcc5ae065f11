"""Sim-to-real checks: a detector trained on synthetic data, scored on real recordings, and
few-shot adaptation to them (leave one recording out); see docs/sim_to_real.md.

``metrics`` (pure figures over clip tables), ``scoring`` (clips of a recording through the
`leakpipe predict` scoring path), ``fewshot`` (fine-tune / from-scratch folds with the project's
``fit()``), ``findings`` (the JSON summary and the figure), ``sim_to_real`` (the whole check).
"""
