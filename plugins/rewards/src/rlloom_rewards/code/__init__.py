"""Code-execution reward: the sandbox, the reward and the HumanEval dataset."""
