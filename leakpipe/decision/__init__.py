"""From segment leak probabilities to file decisions and their figures (pure NumPy / torch).

``voting`` turns a split's segment probabilities into one score per file under a rule,
``metrics`` counts confusion cells over a threshold grid in one pass, ``select`` chooses the
operating point (rule, threshold) on the validation split by a criterion, ``calibration`` maps
the rule's score to a leak probability (Platt scaling fitted on val; ECE, Brier score),
``stacking`` joins a fused detector's parts. ``domain`` (one recording; its shape model in
``lowrank``), ``domain_set`` (a set of recordings) and ``stats_domain`` (a statistics detector's
recording) check whether recordings are like the training ones, and ``verdict`` joins the call
with that check into what a person reads, ``leak_prob`` and ``threshold`` on one scale.
Per-epoch validation in training, the evaluate stage, the baselines and `leakpipe predict` all
decide with these functions, so a detector is judged the same way wherever it runs.
"""
