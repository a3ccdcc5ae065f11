"""The paper's baselines (Table 2): MFCC summaries per clip + classical classifiers.

``features`` turns stored log-mel into per-clip features (pure), ``models`` builds the
classifiers and their grids, ``comparison`` fits, selects on val and reports on test with
evaluate's selection, metrics and bootstrap.
"""
