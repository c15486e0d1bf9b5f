"""rlloom-sglang: ``rollout=sglang``, SGLang driven over its HTTP API."""
