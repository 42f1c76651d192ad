"""What a person sees of jobs: the snapshot, the live views and their poller, charts, tables, text."""
