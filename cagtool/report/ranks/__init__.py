"""Multi-process (distributed) runs: per-rank figures, totals and divergence across ranks."""
