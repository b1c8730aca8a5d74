"""Luigi tasks: thin wrappers over pipeline.steps, models and evaluation."""
