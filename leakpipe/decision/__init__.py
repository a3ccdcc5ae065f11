"""From segment leak probabilities to file decisions and their figures (pure NumPy / torch).

``voting`` turns a split's segment probabilities into one score per file under a rule,
``metrics`` counts confusion cells over a threshold grid in one pass, ``select`` chooses the
operating point (rule, threshold) on the validation split by a criterion, ``calibration`` maps
the rule's score to a leak probability (Platt scaling fitted on val; ECE, Brier score).
Per-epoch validation in training, the evaluate stage, the baselines and `leakpipe predict` all
decide with these functions, so a detector is judged the same way wherever it runs.
"""
