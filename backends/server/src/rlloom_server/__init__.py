"""rlloom-server: rollout engines behind HTTP (``rlloom serve``) and the client engine ``rollout=server``
(:class:`rlloom_serverkit.client.ServerRolloutEngine`, registered here)."""
