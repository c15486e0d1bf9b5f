"""rlloom-agents: multi-turn agent loops, a tool, an environment (see the README)."""
