"""The contract between the rlloom core and its plugins: every protocol a plugin implements.

Each protocol is structural (``typing.Protocol``): a plugin implements the methods, it
need not inherit from anything. Field names and shapes refer to the conventions in :mod:`rlloom.batch`.

Sections: engines (rollout, train, and their optional weight-sharing abilities), resharders,
rewards, algorithms (with their advantage estimators and policy losses), datasets, agents (agent
loops, their episodes, tools, environments), placement (launchers, dispatch modes, futures),
trackers, config abilities. The hooks that register them (what
each factory returns) and their ``register`` callbacks are :mod:`rlloom.plugins.hookspecs`.

**Optional abilities** are small ``runtime_checkable`` protocols of their own (:class:`LendsWeights`,
:class:`ReportsMetrics`, :class:`ChecksModel`, …): the core asks ``isinstance(obj, Ability)`` and
never probes attributes by name. An object has the ability when it has the member.

Importing this module imports no torch (the registry and config errors stay fast); tensors in the
signatures are for the reader and type checkers.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Optional, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from rlloom.batch import Batch
    from rlloom.data import PromptRecord
    from rlloom.plugins.registry import Registry
    from rlloom.types import (ClipLossTerms, Completion, EnvStep, MiniBatchStats, RankCall, RewardResult, Role,
                              RoleSpec, SamplingParams, SyncStats, Turn)

NamedTensors = Iterable[tuple[str, "torch.Tensor"]]

LossFn = Callable[["Batch", dict[str, "torch.Tensor"], "MiniBatchStats"],
                  tuple["torch.Tensor", dict[str, "float | torch.Tensor"]]]
"""``loss_fn(micro_batch, outputs, stats) -> (loss, metrics)``.

``outputs`` holds ``"log_probs"`` [b, R] float32 with grad (and ``"entropy"`` [b, R] when the
engine computes it, ``"values"`` [b, R] for a critic). ``loss`` is this micro-batch's *share* of the
mini-batch loss, normalised with ``stats`` (global counts), so that the engine only sums gradients
over micro-batches. ``metrics`` are floats or 0-d tensors the engine averages over micro-batches
(a tensor may stay on the device until the step's end: reading it per micro-batch would make the
host wait for the GPU each time).
"""


@runtime_checkable
class RolloutEngine(Protocol):
    """Generates responses from token ids."""

    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        """Sample ``sampling.n`` responses for every prompt row.

        In: ``prompts`` [B, P] int64 left-padded, ``prompt_mask`` [B, P] int64, plus any other fields.
        Out: a batch of ``B * n`` rows, interleaved (rows ``i*n … i*n+n-1`` answer prompt ``i``),
        carrying every input field repeated, plus ``responses`` [B*n, R] int64 right-padded with the
        pad id, ``response_mask`` [B*n, R] int64 (1 on generated tokens, EOS included; generation
        stops at EOS or ``max_new_tokens``) and ``rollout_log_probs`` [B*n, R] float32: the policy
        log-prob of each sampled token, log softmax(logits / T) with T = ``sampling.temperature``
        (T = 1 when greedy), top-p and top-k **not** applied; 0 where the mask is 0.
        An engine that cannot report that exact quantity for the sampling asked (vLLM when
        ``sampling.filtered``) leaves ``rollout_log_probs`` out rather than report another one;
        consumers then use the train engine's log-probs.
        R is the longest response in the batch (at most ``max_new_tokens``). The output's
        ``meta["temperature"]`` is that T, so train engines compute the same policy, and
        ``meta["pad_token_id"]`` the pad id.

        Randomness: response ``j`` of prompt ``i`` depends only on (``sampling.seed``,
        ``sampling.first_prompt + i``, ``j``) and the weights, so a call split by prompts over
        several engines samples what the whole call does (see ``SamplingParams.first_prompt``).
        When ``prompts`` has a ``prompt_index`` field [B] (:data:`rlloom.batch.PROMPT_INDEX_FIELD`),
        row ``i``'s index is ``prompt_index[i]`` instead.
        """

    def update_weights(self, named_tensors: NamedTensors) -> None:
        """Load full (unsharded) weights given in Hugging Face parameter naming."""

    def sleep(self) -> None:
        """Free what can be freed (KV cache, weights on GPU) between rollout phases."""

    def wake_up(self) -> None:
        """Restore what :meth:`sleep` freed. Weights are re-synced by the resharder afterwards."""

    def close(self) -> None:
        """Release every resource (processes, memory)."""


@runtime_checkable
class AsyncRolloutEngine(Protocol):
    """Per-request generation: one prompt at a time, many in flight (agent loops, servers).

    An engine that only has the batch call gets this from :class:`rlloom_enginekit.batching.BatchingScheduler`.
    """

    async def generate_one(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        """Sample ``sampling.n`` responses to one prompt (its real token ids, no padding).

        Randomness is keyed as in :meth:`RolloutEngine.generate` with ``sampling.first_prompt`` as this
        prompt's index: requests for prompts ``0 … B-1`` with the same ``sampling.seed`` give the
        tokens of one batch call on those prompts. Cancelling the awaiting task withdraws a request
        that has not started; one already generating stops within one decode step where the batch
        engine has the :class:`BatchesRequests` ability, else it finishes and its result is dropped.
        """


@runtime_checkable
class TrainEngine(Protocol):
    """Holds a trainable (or frozen reference) model, possibly sharded over a process group."""

    def compute_log_probs(self, batch: Batch, entropy: bool = False) -> Batch:
        """Log-probs of the response tokens under the current weights, without grad.

        In: ``prompts``, ``prompt_mask``, ``responses``, ``response_mask``; ``meta["temperature"]``
        T (default 1.0): the policy is softmax(logits / T), as in the rollout engine.
        Out: a batch of the same size with ``log_probs`` [B, R] float32 (0 where
        ``response_mask`` is 0) and, when ``entropy``, ``entropy`` [B, R] float32 (entropy of the
        full next-token distribution at each response position).
        """

    def compute_values(self, batch: Batch) -> Batch:
        """Critic values at each response position: ``values`` [B, R] float32. Critic engines only."""

    def train_step(self, batch: Batch, loss_fn: LossFn) -> dict[str, float]:
        """One optimizer step on ``batch`` (the mini-batch).

        Splits ``batch`` into micro-batches, calls ``loss_fn`` on each with the model's outputs and
        the mini-batch's global :class:`~rlloom.types.MiniBatchStats`, accumulates gradients, clips
        the gradient norm, steps the optimizer and the LR schedule. Returns the averaged ``loss_fn``
        metrics plus ``grad_norm`` and ``lr``.
        """

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Full (unsharded) weights in Hugging Face naming, one tensor at a time (for weight sync)."""

    def save(self, path: str) -> None:
        """Write model, optimizer and LR-schedule state under the directory ``path``."""

    def load(self, path: str) -> None:
        """Restore what :meth:`save` wrote."""

    def offload(self) -> None:
        """Move parameters and optimizer state off the accelerator (no-op on CPU)."""

    def onload(self) -> None:
        """Undo :meth:`offload`."""

    def close(self) -> None:
        """Release every resource (process groups, memory)."""


@runtime_checkable
class LendsWeights(Protocol):
    """Optional ability of a train engine: its live parameters, for a rollout engine in the same process
    to generate with directly (``resharder=shared``)."""

    def live_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The model's own parameter tensors (no copy: the optimizer's in-place updates show through),
        in Hugging Face naming as :meth:`TrainEngine.named_weights`. ValueError when the engine holds
        only a shard of them."""


@runtime_checkable
class BorrowsWeights(Protocol):
    """Optional ability of a rollout engine: generate with tensors another engine owns."""

    def borrow_weights(self, named_tensors: NamedTensors) -> int:
        """Make the model's parameters *be* ``named_tensors`` (same storage, nothing copied), freeing its
        own copies; return how many bytes of its own it let go. ValueError naming the tensor when a
        name, shape, dtype or device does not match."""


@runtime_checkable
class LoadsWeightsFromDir(Protocol):
    """Optional ability of a rollout engine: read a whole set of weights from a folder of safetensors
    files itself (``resharder=safetensors`` then writes the folder and names it, instead of streaming
    tensors through :meth:`RolloutEngine.update_weights`)."""

    def load_weights_from_dir(self, path: str) -> None: ...


@runtime_checkable
class BatchesRequests(Protocol):
    """Optional ability of a rollout engine: a batch call gathered from separate requests
    (``rlloom_enginekit.batching``), whose rows can carry their own seeds and be withdrawn mid-call.
    ``decode_steps``: the model calls its decoding loops have made so far (servers report it)."""

    decode_steps: int

    def generate_requests(self, prompts: Batch, sampling: SamplingParams,
                          cancelled: Optional[torch.Tensor] = None) -> Batch:
        """:meth:`RolloutEngine.generate`, and:

        - a :data:`rlloom.batch.SEED_FIELD` field [B] gives row ``i`` the seed ``sampling_seed[i]`` in
          place of ``sampling.seed`` (randomness keyed by (row seed, prompt index, response index)),
          so a row samples what it samples alone with that seed;
        - ``cancelled``: bool [B] on the CPU, which another thread may set at any time; the engine
          reads it before every decode step and stops decoding the rows of a prompt set True within
          that step (their responses in the output are cut where they stood), the others go on.
        """


@runtime_checkable
class ReportsMetrics(Protocol):
    """Optional ability of a rollout engine: metrics of its own (e.g. resident memory per phase,
    ``rollout/rss_gb/<phase>``), added to the step's after each weight sync."""

    def metrics(self) -> dict[str, float]: ...


@runtime_checkable
class Closable(Protocol):
    """Optional ability of a reward function or resharder (engines must have it): release what it
    holds (worker processes, files) when the run ends."""

    def close(self) -> None: ...


@runtime_checkable
class NamesInertRows(Protocol):
    """Optional ability of a :data:`LossFn`: which rows of a mini-batch add nothing to its gradient
    (a policy-gradient loss with no KL or entropy term: the rows whose advantages are all 0). A train
    engine may leave them out of its forward and backward passes after counting them in the
    :class:`~rlloom.types.MiniBatchStats` it hands the loss, so the update is the same; the loss's
    metrics then cover the rows it trained."""

    def inert_rows(self, batch: Batch) -> torch.Tensor:
        """Bool [B]: True for the rows of ``batch`` whose loss has zero gradient."""


@runtime_checkable
class Resharder(Protocol):
    """Moves weights from a train engine's layout to a rollout engine's."""

    def sync(self, train: TrainEngine, rollout: RolloutEngine) -> SyncStats:
        """Make ``rollout`` generate with ``train``'s current weights; report what moved."""


@runtime_checkable
class DistributedResharder(Resharder, Protocol):
    """A resharder whose two sides can run in different processes (split placement).

    A launcher that places train and rollout roles in different processes forms a *sync group*:
    rank 0 is the train pool's rank 0, ranks 1..N are the rollout pool's ranks 0..N-1. Then, per sync:

    - ``connect(rank, world_size, host, port)`` (once, before the first sync, on every member at the
      same time; ``host:port`` is a free address on rank 0's node);
    - ``send(train)`` on every rank of the train pool (ranks other than pool rank 0 are not members:
      they only take part in the train engine's collective ``named_weights``), at the same time as
      ``receive(rollout)`` on every rollout rank. Both return the :class:`~rlloom.types.SyncStats`
      of what moved.

    Within one process, ``sync(train, rollout)`` still works without a group.
    """

    def connect(self, rank: int, world_size: int, host: str, port: int) -> None: ...

    def send(self, train: TrainEngine) -> SyncStats: ...

    def receive(self, rollout: RolloutEngine) -> SyncStats: ...


@runtime_checkable
class RewardFn(Protocol):
    """Scores responses."""

    def __call__(self, batch: Batch) -> RewardResult:
        """In: ``response_text``, ``ground_truth``, ``data_source``, ``prompt_text`` (objects) and the
        token fields; out: a :class:`~rlloom.types.RewardResult` with one score per row. A verifier
        that raises on a sample must count it in ``num_errors`` and score it, not propagate."""


@runtime_checkable
class Algorithm(Protocol):
    """An RL method: which models it needs and what one training step does.

    ``step`` is a short program against the controller (``rlloom.controller.step.StepContext``):
    generate, score, compute log-probs, advantages, update, sync. It returns the step's metrics.

    Optional: state that must survive a resume (:class:`StatefulAlgorithm`); the algorithm's config
    says how many optimizer steps a step takes (:class:`PlansOptimizerSteps`) and which roles it adds
    to the standard ones (:class:`DeclaresRoles`).
    """

    needs_reference: bool
    needs_critic: bool

    def step(self, ctx: Any, prompts: Batch) -> dict[str, float]: ...


@runtime_checkable
class StatefulAlgorithm(Protocol):
    """The optional part of :class:`Algorithm` for state that must survive a resume."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class DeclaresRoles(Protocol):
    """Optional ability of an algorithm config class (the registered dataclass): the roles the
    algorithm adds to the standard ones (:class:`~rlloom.types.Role`; Safe-RLHF's cost function and
    cost critic). Read from the class when the config is composed (a declared reward role adds its
    config group) and when the trainer starts the run's roles."""

    extra_roles: tuple[Role, ...]


class AdvantageEstimator(Protocol):
    """The one signature of every advantage estimator (hook ``register_advantage_estimators``, config
    key ``algorithm.adv_estimator``). Every argument is passed, by keyword; an estimator reads the
    ones it needs and ignores the rest (end its signature with ``**_``). An input the batch does not
    hold is None: raise naming it (:func:`rlloom_algokit.advantages.need`).

    - ``scores`` [N] float32: each response's sequence score (an empty response keeps its score);
    - ``token_level_rewards`` [N, R] float32: rewards placed on tokens (the score on the last
      token), after any KL penalty in the reward;
    - ``response_mask`` [N, R]: 1 on response tokens;
    - ``group_ids``: N hashables, equal for the responses to one prompt (the batch's ``uid``);
    - ``baselines`` [N] or None: a baseline score per response (ReMax: the greedy response's);
    - ``gamma``: the discount of token-level returns;
    - ``norm_by_std`` / ``eps``: divide by the group's std (+ eps), where an estimator groups.

    Returns the advantages [N, R] float32, 0 on padding.
    """

    def __call__(
        self,
        *,
        scores: Optional[torch.Tensor],
        token_level_rewards: Optional[torch.Tensor],
        response_mask: torch.Tensor,
        group_ids: Optional[Sequence[Hashable]],
        baselines: Optional[torch.Tensor],
        gamma: float,
        norm_by_std: bool,
        eps: float,
    ) -> torch.Tensor: ...


class PolicyLoss(Protocol):
    """The one signature of every policy loss (hook ``register_policy_losses``, config key
    ``algorithm.policy_loss``): per-token terms from the current ``log_probs``, the behaviour
    ``old_log_probs`` (constants), ``advantages`` and the ``response_mask`` (all [B, R]) and the clip
    settings of :class:`rlloom_algokit.config.PolicyLossConfig`, by keyword. Returns
    :class:`rlloom.types.ClipLossTerms` (loss, clip indicators, per-token log π_old − log π), all
    0 on padding; :func:`rlloom_algokit.policy_loss.make_policy_loss_fn` aggregates them and adds
    the entropy and KL terms. A token whose advantage is 0 must get loss 0 with zero gradient (every
    in-tree loss is linear in the advantage): rows whose advantages are all 0 are left out of the
    update by default (``algorithm.skip_zero_advantage_rows``, :class:`NamesInertRows`)."""

    def __call__(
        self,
        log_probs: torch.Tensor,
        old_log_probs: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        clip_ratio_low: float,
        clip_ratio_high: float,
        clip_ratio_c: Optional[float],
    ) -> ClipLossTerms: ...


class PromptDataset(Protocol):
    """What a dataset factory returns: disjoint train and validation prompts
    (:class:`rlloom.data.PromptRecord`), in a fixed order."""

    train: list[PromptRecord]
    val: list[PromptRecord]


@runtime_checkable
class CountsInvalidRows(Protocol):
    """Optional part of :class:`PromptDataset`: how many malformed rows it skipped (reported as
    ``data/invalid_rows``)."""

    num_invalid: int


@runtime_checkable
class Episode(Protocol):
    """One trajectory in the making, which the agent runner hands to :meth:`AgentLoop.run`.

    Its tokens only grow, and nothing is ever tokenised twice: an assistant turn's ids go in exactly
    as the engine sampled them (``response_mask`` 1, with their log-probs); messages the loop adds
    go in as the ids the model's chat template puts after the turns so far (``response_mask`` 0).
    ``row`` is the dataset row; the prompt (with the loop's tools described in it) is already in.
    ``tokenizer``: the model's (a Hugging Face tokenizer), for loops that measure or cut text in tokens.
    ``finished``: whether it has ended (:meth:`finish`, or its budget ran out).
    """

    row: PromptRecord
    tokenizer: Any
    finished: bool

    async def assistant_turn(self) -> Turn | None:
        """Sample the next assistant turn and append it. None when the episode's response budget
        is spent (the episode is then finished with reason ``"length"``)."""

    def add_messages(self, messages: list[dict[str, str]]) -> bool:
        """Append ``messages`` (chat messages, e.g. ``{"role": "tool", "content": ...}``) after the last
        turn, with the template's boundary tokens, all masked out. False when they do not fit the
        budget (the episode is then finished with reason ``"length"``)."""

    def extend_to(self, ids: Sequence[int]) -> bool:
        """For loops that see whole conversations as token ids (the OpenAI gateway): when ``ids`` are
        the episode's prompt and response ids followed by more, append the more (``response_mask``
        0; before the first sampled token, to the prompt) and return True; a finished episode, or
        ids that differ anywhere in what the episode holds, return False and change nothing. Extra
        ids that leave no room to answer finish the episode with ``"length"`` (True, nothing appended)."""
        ...

    def restart(self, prompt_ids: Sequence[int]) -> None:
        """Begin a new sample of this episode whose prompt is ``prompt_ids`` (a fork: what was
        sampled so far is dropped, the trajectory is the last sample); counters and turns go on."""
        ...

    def count(self, name: str, k: int = 1) -> None:
        """Add ``k`` to the episode's counter ``name`` (reported as ``agent/<name>``, the batch's sum,
        and ``agent/<name>/mean``, per trajectory)."""

    def finish(self, reason: str, reward: float | None = None, parts: dict[str, float] | None = None) -> None:
        """End the episode: ``reason`` (``answer``, ``max_turns``, ``length``, ``tool_error``, …; reported
        as ``agent/finish_reason/<reason>``) and, when the loop scores it itself (an environment), its
        ``reward`` and named ``parts``. A later call keeps the first reason (an episode the budget ended
        is ``length``) but may still give the reward."""


@runtime_checkable
class Tool(Protocol):
    """A tool the model may call (``register_tools``): its name, description and JSON-schema
    ``parameters`` (an ``object`` schema) are shown to the model through the chat template's tool
    format; a call's arguments are validated against ``parameters`` before the tool sees them."""

    name: str
    description: str
    parameters: dict[str, Any]

    async def __call__(self, arguments: dict[str, Any], row: PromptRecord) -> str:
        """The observation for one call (text shown to the model). Raising, hanging past the loop's
        timeout or returning too much is the loop's to handle: the model sees an error observation."""


@runtime_checkable
class Environment(Protocol):
    """A multi-turn task that is not tool calls (``register_environments``; one instance per
    episode), gym-style."""

    def reset(self, row: PromptRecord) -> str | None:
        """Start an episode on ``row``; the first observation, shown as a user message after the
        prompt (None: the prompt alone)."""

    def step(self, action: str) -> EnvStep:
        """Take the text of the model's turn; return the observation, the reward and whether done."""


@runtime_checkable
class AgentLoop(Protocol):
    """``agent=<name>``: how one trajectory is driven, turn by turn (built once per run by
    ``factory(cfg, registry)``; ``run`` is called for hundreds of episodes at once on one event loop,
    so it must await, never block). A loop that holds resources (a server, processes) may have an
    ``async def close()``: the runner awaits it on that event loop when it closes."""

    tools: Sequence[Tool]

    async def run(self, episode: Episode) -> None:
        """Drive ``episode`` to its end (``episode.finish``); returning without finishing finishes it
        with reason ``"answer"``."""


class Launcher(Protocol):
    """Places a run's roles (hook ``register_launchers``, config group ``launcher``).

    ``start_role(spec, registry)`` returns a handle whose methods are the built object's methods
    (same arguments, same results); a launcher that builds in this process uses ``registry``, one that
    builds elsewhere ships ``spec`` (picklable) and rebuilds the registry there from the installed
    entry points. A handle whose calls run elsewhere is a :class:`RemoteHandle`. ``shutdown()``
    releases everything (it is called after a failed start too).
    """

    def start_role(self, spec: RoleSpec, registry: Registry) -> Any: ...

    def shutdown(self) -> None: ...


class DispatchMode(Protocol):
    """How one call on a worker group is spread over its ranks (hook ``register_dispatch_modes``; the
    built-in modes and their contract: :mod:`rlloom.controller.dispatch`)."""

    def scatter(self, args: tuple, kwargs: dict, world_size: int) -> list[RankCall | None]:
        """What rank ``i`` runs (None: rank ``i`` sits the call out)."""

    def gather(self, results: list[Any], args: tuple, kwargs: dict) -> Any:
        """The caller's result from the ranks' (None for a rank that sat out or dropped its result)."""


@runtime_checkable
class Future(Protocol):
    """A role method's call submitted now, its result taken later (:mod:`rlloom.controller.futures`)."""

    def result(self) -> Any:
        """The call's result; raises what the call raised."""

    def span(self) -> tuple[float, float]:
        """``(start, end)`` (``time.time()`` seconds) of the call where it ran; waits like :meth:`result`."""


@runtime_checkable
class RemoteHandle(Protocol):
    """A role handle whose calls run outside the controller and can be submitted without waiting."""

    def submit_call(self, method: str, args: tuple, kwargs: dict) -> Future:
        """Start ``method(*args, **kwargs)`` on the role; return its future at once."""


@runtime_checkable
class Tracker(Protocol):
    """Receives metrics; a failing tracker is disabled with a warning, never kills a run (optional:
    :class:`RewindsRecord`)."""

    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class RewindsRecord(Protocol):
    """Optional ability of a :class:`Tracker`."""

    def rewind(self, step: int) -> str | None:
        """Drop what was logged for steps after ``step`` (-1: everything); the trainer calls it when a
        run starts in a folder an interrupted run logged to, so the record equals an uninterrupted
        run's. May return a few words on what it dropped (``"2 rows (steps 3-4) of metrics.jsonl"``),
        which the trainer prints; ``None`` when there is nothing to say."""


@runtime_checkable
class ChecksModel(Protocol):
    """Optional ability of a train-engine or rollout-engine config (the registered dataclass)."""

    def check_model(self, model_path: str, run_device: str) -> None:
        """Called once the model folder exists and before any engine loads weights (``launcher=local``
        only: elsewhere the engines check when they start): ValueError for shapes the engine cannot
        run (a head size without a kernel), a config error naming the engine choice."""


@runtime_checkable
class StartsWithOtherWeights(Protocol):
    """Optional ability of a rollout-engine config (the registered dataclass)."""

    def starts_with_other_weights(self) -> bool:
        """True when the engine may start with weights other than the run's starting weights (servers
        another process started: they may hold another run's weights, or a later step's). The trainer
        of a fresh run then syncs the actor's weights into the engine before step 0, its validation
        included, as it does for every resumed run."""


@runtime_checkable
class LoadsInOneProcess(Protocol):
    """Optional ability of a train-engine config class: the settings under which one process can load
    a checkpoint the engine wrote at any layout (``rlloom export``), replacing the saved ones
    (``train_engine=megatron``: ``{"tensor_parallel_size": 1}``)."""

    single_process_overrides: dict[str, Any]


@runtime_checkable
class ChecksRoles(Protocol):
    """Optional ability of any config section that names roles (``launcher.mapping``): checked when
    the config is composed against every role a run of the chosen algorithm may have."""

    def check_roles(self, roles: list[str]) -> None:
        """ValueError, naming the key as the user types it and the valid ``roles``, for a role the run has not."""


@runtime_checkable
class ChecksInstalled(Protocol):
    """Optional ability of a config section: checks what only the installed plugins can tell (an agent
    config's tool names and their settings), when the run's config is composed; a ValueError, whose
    message names the key, is a config error."""

    def check_installed(self, registry: Registry) -> None:
        ...


@runtime_checkable
class PlansOptimizerSteps(Protocol):
    """Optional ability of an algorithm config (the registered dataclass); without it a step takes
    one optimizer step per trained engine."""

    def optimizer_steps_per_step(self, train_batch_size: int) -> int:
        """Optimizer steps one training step takes on each trained engine for ``train_batch_size``
        prompts (engines size their LR schedules by it). ValueError, naming the key as the user
        types it (``algorithm.ppo_mini_batch_size``), when the batch cannot be cut as configured:
        it is checked when the config is composed."""
