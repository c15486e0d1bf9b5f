"""rlloom-serverkit: rollout over HTTP, for the backends that talk to rollout servers (rlloom-server,
rlloom-sglang): the request schema both ways (:mod:`.schema`), the client engine (:mod:`.client`)
and its settings (:mod:`.config`). A library: no entry point."""
