"""Figures of a mode record that every report shares: counts, compile time, step-time statistics
(metrics.py); confidence intervals of their ratios (intervals.py); a long series thinned for drawing,
never for the figures (downsample.py)."""
