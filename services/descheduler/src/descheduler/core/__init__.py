"""Pure LowNodeLoad logic: classification, anomaly detection, victim selection, limits."""
