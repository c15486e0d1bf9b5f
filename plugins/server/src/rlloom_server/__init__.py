"""rlloom-server: rollout engines behind HTTP (``rlloom serve``) and the client engine ``rollout=server``."""
