"""rlloom-agentkit: what agent loops share (see the README): episodes whose tokens only grow, tool calls,
and the runner that makes trajectories."""
