"""CI cost gates: thresholds from flags or config, checked against a trace (and a baseline)."""
