"""leakpipe: a reproducible pipeline for training and evaluating acoustic leak detectors."""

__version__ = "0.1.0"
