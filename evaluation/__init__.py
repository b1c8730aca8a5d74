"""Evaluation metrics for cross-modal retrieval (pure NumPy functions; see ``evaluation.metrics``)."""
