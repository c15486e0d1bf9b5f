#!/usr/bin/env bash
# PPO with a critic (value model, GAE, clipped value loss) and an adaptive KL penalty in the reward, on the
# quickstart's task. Extra arguments are Hydra overrides and win over the settings below.
#   examples/ppo_critic/run.sh            # SmolLM2-135M-Instruct
#   examples/ppo_critic/run.sh --short    # the tiny random model, 2 steps (CI runs it)
set -euo pipefail
SETTINGS=(
    algorithm=ppo
    algorithm.n=8
    algorithm.ppo_epochs=2
    algorithm.ppo_mini_batch_size=2
    algorithm.critic_warmup=2
    algorithm.use_kl_in_reward=true
    algorithm.kl_ctrl_type=adaptive
    train_engine.critic_lr=1e-5
)
if [[ ${1:-} == --short ]]; then
    shift
    SETTINGS=(preset=tiny "${SETTINGS[@]}" train_engine.critic_lr=1e-2 algorithm.critic_warmup=1
              trainer.total_steps=2)
fi
exec rlloom train "${SETTINGS[@]}" "$@"
