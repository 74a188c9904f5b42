"""Pure logic of the collector: message -> rows, time-series maths, retention plans."""
