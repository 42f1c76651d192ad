"""The job record and its statuses, the store (the one place that names a run's files), file primitives,
processes, names and words."""
