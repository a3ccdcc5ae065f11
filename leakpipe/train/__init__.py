"""Training core: losses, optimizer + schedule, early stopping, checkpoints, loop and fit()."""
