"""Built-in trackers: a live console view and a JSONL file."""
