"""Pure recommender core: histograms, per-container aggregation, estimator, profiles, keys."""
