"""Decision rules (segment -> long segment -> file) and confusion-matrix metrics."""
