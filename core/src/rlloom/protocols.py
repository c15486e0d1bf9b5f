"""The contract between the rlloom core and its plugins: every protocol a plugin implements, structural
(``typing.Protocol``: implement the methods, inherit nothing). Field names and shapes are :mod:`rlloom.batch`'s;
the hooks that register the components are :mod:`rlloom.plugins.hookspecs`.

Sections: engines (and their weight-sharing abilities), resharders, rewards, algorithms (advantage
estimators, policy losses), datasets, agents (loops, episodes, tools, environments), placement
(launchers, dispatch modes, futures), trackers, config abilities. **Optional abilities** are small
``runtime_checkable`` protocols of their own (:class:`LendsWeights`, :class:`ChecksModel`, …): the core asks
``isinstance(obj, Ability)``, never probes attributes by name. Importing this module imports no torch."""

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
"""``loss_fn(micro_batch, outputs, stats) -> (loss, metrics)``. ``outputs``: ``"log_probs"`` [b, R] float32
with grad (``"entropy"`` [b, R] when the engine computes it, ``"values"`` [b, R] for a critic). ``loss``:
this micro-batch's *share* of the mini-batch loss, normalised with ``stats`` (global counts), so the engine
only sums gradients. ``metrics``: floats or 0-d tensors (left on the device: reading one per micro-batch
would make the host wait for the GPU), averaged over micro-batches."""


@runtime_checkable
class RolloutEngine(Protocol):
    """Generates responses from token ids."""

    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        """Sample ``sampling.n`` responses for every prompt row.

        In: ``prompts`` [B, P] int64 left-padded, ``prompt_mask`` [B, P] int64, plus any other fields.
        Out: ``B * n`` rows, interleaved (rows ``i*n … i*n+n-1`` answer prompt ``i``), every input field
        repeated, plus ``responses`` [B*n, R] int64 right-padded with the pad id, ``response_mask``
        [B*n, R] int64 (1 on generated tokens, EOS included; generation stops at EOS or
        ``max_new_tokens``) and ``rollout_log_probs`` [B*n, R] float32: each sampled token's log
        softmax(logits / T), T = ``sampling.temperature`` (1 when greedy), top-p and top-k **not**
        applied, 0 where the mask is 0 (an engine that cannot report exactly that, vLLM when
        ``sampling.filtered``, leaves the field out). R is the longest response. ``meta["temperature"]``
        is T (train engines compute the same policy), ``meta["pad_token_id"]`` the pad id.

        Randomness: response ``j`` of prompt ``i`` depends only on (``sampling.seed``,
        ``sampling.first_prompt + i``, ``j``) and the weights, so a call split by prompts over several
        engines samples what the whole call does; a ``prompt_index`` field [B]
        (:data:`rlloom.batch.PROMPT_INDEX_FIELD`) gives row ``i`` the index ``prompt_index[i]`` instead."""

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
    """Per-request generation: one prompt at a time, many in flight (agent loops, servers); an engine with
    the batch call only gets it from :class:`rlloom_enginekit.batching.BatchingScheduler`."""

    async def generate_one(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        """Sample ``sampling.n`` responses to one prompt (its real token ids, no padding), randomness keyed as
        in :meth:`RolloutEngine.generate` with ``sampling.first_prompt`` as its index (requests for prompts
        ``0 … B-1`` give the tokens of one batch call). Cancelling the awaiting task withdraws a request not
        started; one generating stops within one decode step where the engine :class:`BatchesRequests`,
        else it finishes and its result is dropped."""


@runtime_checkable
class TrainEngine(Protocol):
    """Holds a trainable (or frozen reference) model, possibly sharded over a process group."""

    def compute_log_probs(self, batch: Batch, entropy: bool = False) -> Batch:
        """Log-probs of the response tokens under the current weights, without grad. In: ``prompts``,
        ``prompt_mask``, ``responses``, ``response_mask``; ``meta["temperature"]`` T (default 1.0): the
        policy is softmax(logits / T). Out: ``log_probs`` [B, R] float32 (0 where ``response_mask`` is 0)
        and, when ``entropy``, ``entropy`` [B, R] float32 (of the full next-token distribution)."""

    def compute_values(self, batch: Batch) -> Batch:
        """Critic values at each response position: ``values`` [B, R] float32. Critic engines only."""

    def train_step(self, batch: Batch, loss_fn: LossFn) -> dict[str, float]:
        """One optimizer step on ``batch`` (the mini-batch): ``loss_fn`` on each micro-batch with the
        model's outputs and the mini-batch's global :class:`~rlloom.types.MiniBatchStats`, gradients
        accumulated and clipped, optimizer and LR schedule stepped. Returns the averaged ``loss_fn``
        metrics plus ``grad_norm`` and ``lr`` (:mod:`rlloom_enginekit.train_step`)."""

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
    """Optional ability of a train engine (``resharder=shared``)."""

    def live_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The model's own parameter tensors (no copy: in-place updates show through), named as by
        :meth:`TrainEngine.named_weights`; ValueError when the engine holds only a shard of them."""


@runtime_checkable
class BorrowsWeights(Protocol):
    """Optional ability of a rollout engine: generate with tensors another engine owns."""

    def borrow_weights(self, named_tensors: NamedTensors) -> int:
        """Make the model's parameters *be* ``named_tensors`` (nothing copied), freeing its own; return the
        bytes it let go. ValueError naming the tensor whose name, shape, dtype or device does not match."""


@runtime_checkable
class LoadsWeightsFromDir(Protocol):
    """Optional ability of a rollout engine: read its weights from a folder of safetensors files
    (``resharder=safetensors`` then writes one and names it instead of calling ``update_weights``)."""

    def load_weights_from_dir(self, path: str) -> None: ...


@runtime_checkable
class BatchesRequests(Protocol):
    """Optional ability of a rollout engine: a batch call gathered from separate requests, whose rows carry
    their own seeds and can be withdrawn mid-call; ``decode_steps``: its decoding loops' model calls so far."""

    decode_steps: int

    def generate_requests(self, prompts: Batch, sampling: SamplingParams,
                          cancelled: Optional[torch.Tensor] = None) -> Batch:
        """:meth:`RolloutEngine.generate`, where a :data:`rlloom.batch.SEED_FIELD` field [B] gives row ``i``
        the seed ``sampling_seed[i]`` (it samples what it samples alone with that seed), and ``cancelled``,
        bool [B] on the CPU that another thread may set, is read before every decode step: rows set True
        stop within that step (their responses cut where they stood), the others go on."""


@runtime_checkable
class ReportsMetrics(Protocol):
    """Optional ability of a rollout engine: metrics of its own (``rollout/rss_gb/<phase>``), added to the
    step's after each weight sync."""

    def metrics(self) -> dict[str, float]: ...


@runtime_checkable
class Closable(Protocol):
    """Optional ability of a reward function or resharder (engines must have it): release what it
    holds (worker processes, files) when the run ends."""

    def close(self) -> None: ...


@runtime_checkable
class NamesInertRows(Protocol):
    """Optional ability of a :data:`LossFn`: the rows that add nothing to its gradient (with no KL or entropy
    term, those whose advantages are all 0). A train engine may leave them out of its passes after counting
    them in the :class:`~rlloom.types.MiniBatchStats` (the update is the same; metrics cover the rows trained)."""

    def inert_rows(self, batch: Batch) -> torch.Tensor:
        """Bool [B]: True for the rows of ``batch`` whose loss has zero gradient."""


@runtime_checkable
class Resharder(Protocol):
    """Moves weights from a train engine's layout to a rollout engine's."""

    def sync(self, train: TrainEngine, rollout: RolloutEngine) -> SyncStats:
        """Make ``rollout`` generate with ``train``'s current weights; report what moved."""


@runtime_checkable
class DistributedResharder(Resharder, Protocol):
    """A resharder whose two sides can run in different processes. The launcher forms a *sync group*:
    rank 0 is the train pool's rank 0, ranks 1..N the rollout pool's ranks 0..N-1. ``connect(rank,
    world_size, host, port)`` runs once on every member at the same time (``host:port``: a free address
    on rank 0's node); then per sync, ``send(train)`` on every train rank (only pool rank 0 is a member,
    the others join the collective ``named_weights``) with ``receive(rollout)`` on every rollout rank,
    each returning the :class:`~rlloom.types.SyncStats` of what moved. ``sync`` still works in one process."""

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
    """An RL method: which models it needs, and ``step``, a short program against the controller
    (:class:`rlloom.controller.step.StepContext`) returning the step's metrics. Optionally
    :class:`StatefulAlgorithm`; its config may be :class:`PlansOptimizerSteps` and :class:`DeclaresRoles`."""

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
    """Optional ability of an algorithm config class: the roles (:class:`~rlloom.types.Role`) it adds to the
    standard ones (Safe-RLHF's cost function and cost critic), read when the config is composed and when
    the trainer starts the run's roles."""

    extra_roles: tuple[Role, ...]


class AdvantageEstimator(Protocol):
    """The one signature of every advantage estimator (``algorithm.adv_estimator``). Every argument is passed,
    by keyword; an estimator reads those it needs (end its signature with ``**_``); an input the batch does
    not hold is None: raise naming it (:func:`rlloom_algokit.advantages.need`). ``scores`` [N] float32: each
    response's score (an empty response keeps its score); ``token_level_rewards`` [N, R] float32: rewards on
    tokens (the score on the last), after any KL penalty; ``response_mask`` [N, R]; ``group_ids``: N
    hashables, equal for the responses to one prompt (``uid``); ``baselines`` [N] or None: a baseline per
    response (ReMax: the greedy response's); ``gamma``: the discount of token-level returns;
    ``norm_by_std`` / ``eps``: divide by the group's std (+ eps). Returns the advantages [N, R] float32, 0 on
    padding."""

    def __call__(self, *, scores: Optional[torch.Tensor], token_level_rewards: Optional[torch.Tensor],
                 response_mask: torch.Tensor, group_ids: Optional[Sequence[Hashable]],
                 baselines: Optional[torch.Tensor], gamma: float, norm_by_std: bool, eps: float) -> torch.Tensor: ...


class PolicyLoss(Protocol):
    """The one signature of every policy loss (``algorithm.policy_loss``): per-token terms from ``log_probs``,
    the behaviour ``old_log_probs`` (constants), ``advantages``, ``response_mask`` (all [B, R]) and the clip
    settings (:class:`rlloom_algokit.config.PolicyLossConfig`, by keyword), as :class:`rlloom.types.ClipLossTerms`
    (0 on padding; :func:`rlloom_algokit.policy_loss.make_policy_loss_fn` aggregates them, adds entropy and
    KL). A token whose advantage is 0 must get loss 0 and zero gradient: rows whose advantages are all 0 are
    left out of the update by default (``algorithm.skip_zero_advantage_rows``, :class:`NamesInertRows`)."""

    def __call__(self, log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                 response_mask: torch.Tensor, *, clip_ratio_low: float, clip_ratio_high: float,
                 clip_ratio_c: Optional[float]) -> ClipLossTerms: ...


class PromptDataset(Protocol):
    """What a dataset factory returns: disjoint train and validation prompts
    (:class:`rlloom.data.PromptRecord`), in a fixed order."""

    train: list[PromptRecord]
    val: list[PromptRecord]


@runtime_checkable
class CountsInvalidRows(Protocol):
    """Optional part of :class:`PromptDataset`: the malformed rows it skipped (``data/invalid_rows``)."""

    num_invalid: int


@runtime_checkable
class Episode(Protocol):
    """One trajectory in the making, handed to :meth:`AgentLoop.run`. Its tokens only grow and nothing is
    tokenised twice: an assistant turn's ids go in as sampled (``response_mask`` 1, with their log-probs),
    messages the loop adds as the ids the chat template puts after the turns so far (``response_mask`` 0).
    ``row``: the dataset row (its prompt, with the loop's tools described, is already in); ``tokenizer``:
    the model's Hugging Face tokenizer; ``finished``: whether it has ended (:meth:`finish`, or its budget ran out)."""

    row: PromptRecord
    tokenizer: Any
    finished: bool

    async def assistant_turn(self) -> Turn | None:
        """Sample the next assistant turn and append it; None when the response budget is spent (the
        episode is then finished with reason ``"length"``)."""

    def add_messages(self, messages: list[dict[str, str]]) -> bool:
        """Append chat ``messages`` (``{"role": "tool", "content": ...}``) after the last turn, with the
        template's boundary tokens, masked out; False when they do not fit (then finished, ``"length"``)."""

    def extend_to(self, ids: Sequence[int]) -> bool:
        """For loops that see whole conversations as token ids (the OpenAI gateway): when ``ids`` are
        the episode's prompt and response ids followed by more, append the more (``response_mask``
        0; before the first sampled token, to the prompt) and return True; a finished episode, or
        ids that differ anywhere in what the episode holds, return False and change nothing. Extra
        ids that leave no room to answer finish the episode with ``"length"`` (True, nothing appended)."""

    def restart(self, prompt_ids: Sequence[int]) -> None:
        """Begin a new sample of this episode whose prompt is ``prompt_ids`` (a fork: what was
        sampled so far is dropped, the trajectory is the last sample); counters and turns go on."""

    def count(self, name: str, k: int = 1) -> None:
        """Add ``k`` to the counter ``name`` (``agent/<name>``: the batch's sum; ``agent/<name>/mean``)."""

    def finish(self, reason: str, reward: float | None = None, parts: dict[str, float] | None = None) -> None:
        """End the episode: ``reason`` (``answer``, ``max_turns``, ``length``, …: ``agent/finish_reason/<reason>``)
        and, when the loop scores it (an environment), ``reward`` and named ``parts``; a later call keeps the
        first reason but may still give the reward."""


@runtime_checkable
class Tool(Protocol):
    """A tool the model may call: ``name``, ``description`` and the JSON-schema ``parameters`` (an ``object``
    schema) are shown through the chat template's tool format; a call's arguments are validated against
    ``parameters`` before the tool sees them."""

    name: str
    description: str
    parameters: dict[str, Any]

    async def __call__(self, arguments: dict[str, Any], row: PromptRecord) -> str:
        """The observation (text shown to the model) for one call; raising, hanging past the loop's timeout
        or returning too much shows the model an error observation."""


@runtime_checkable
class Environment(Protocol):
    """A multi-turn task that is not tool calls, gym-style (one instance per episode)."""

    def reset(self, row: PromptRecord) -> str | None:
        """Start an episode on ``row``; the first observation, shown as a user message after the
        prompt (None: the prompt alone)."""

    def step(self, action: str) -> EnvStep:
        """Take the text of the model's turn; return the observation, the reward and whether done."""


@runtime_checkable
class AgentLoop(Protocol):
    """``agent=<name>``: how a trajectory is driven, turn by turn (built once per run; ``run`` serves hundreds
    of episodes at once on one event loop, so it must await, never block). A loop that holds resources (a
    server, processes) may be :class:`Closable` (its ``close`` may be async: the runner awaits it on that loop)."""

    tools: Sequence[Tool]

    async def run(self, episode: Episode) -> None:
        """Drive ``episode`` to its end (``episode.finish``); returning without finishing finishes it
        with reason ``"answer"``."""


class Launcher(Protocol):
    """Places a run's roles. ``start_role(spec, registry)`` returns a handle whose methods are the built
    object's (same arguments, same results): built here with ``registry``, or elsewhere from ``spec``
    (picklable) and a registry of the installed entry points, a :class:`RemoteHandle` then.
    ``shutdown()`` releases everything (after a failed start too)."""

    def start_role(self, spec: RoleSpec, registry: Registry) -> Any: ...
    def shutdown(self) -> None: ...


@runtime_checkable
class PlacesInPools(Protocol):
    """Optional ability of a launcher's config that places roles in pools of processes (``launcher=ray``): ``pools()``
    maps each pool to its number of processes, ``pool_of(role)`` names the pool that runs ``role``."""

    def pools(self) -> dict[str, int]: ...
    def pool_of(self, role: str) -> str: ...


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
        """Drop what was logged after ``step`` (-1: everything) when a run starts in a folder an interrupted
        run logged to; a few words on what it dropped (``"2 rows (steps 3-4) of metrics.jsonl"``) or None."""


@runtime_checkable
class ChecksModel(Protocol):
    """Optional ability of a train-engine or rollout-engine config."""

    def check_model(self, model_path: str, run_device: str) -> None:
        """Called once the model folder exists, before any weights load (``launcher=local`` only; elsewhere
        engines check when they start): ValueError, a config error, for shapes the engine cannot run."""


@runtime_checkable
class StartsWithOtherWeights(Protocol):
    """Optional ability of a rollout-engine config."""

    def starts_with_other_weights(self) -> bool:
        """True when the engine may start with other weights than the run's (servers another process
        started): a fresh run then syncs the actor's weights into it before step 0, as a resumed run does."""


@runtime_checkable
class LoadsInOneProcess(Protocol):
    """Optional ability of a train-engine config class: the settings under which one process loads a
    checkpoint written at any layout (``rlloom export``; megatron: ``{"tensor_parallel_size": 1}``)."""

    single_process_overrides: dict[str, Any]


@runtime_checkable
class ChecksRoles(Protocol):
    """Optional ability of a config section that names roles (``launcher.mapping``), checked when composed."""

    def check_roles(self, roles: list[str]) -> None:
        """ValueError, naming the key as the user types it and the valid ``roles``, for a role the run has not."""


@runtime_checkable
class ChecksInstalled(Protocol):
    """Optional ability of a config section: checks what only the installed plugins can tell (an agent config's
    tool names and settings) when the config is composed; a ValueError naming the key is a config error."""

    def check_installed(self, registry: Registry) -> None: ...


@runtime_checkable
class ChecksBeforeRun(Protocol):
    """Optional ability of a config section: checks what lies outside the config (a Ray cluster answers at
    ``launcher.address``) when a run starts, before torch loads; a ValueError or ConnectionError is a config error."""

    def check_before_run(self) -> None: ...


@runtime_checkable
class ChecksOtherSections(Protocol):
    """Optional ability of a config section: checks against the run's other sections (by group) when the config
    is composed (``reward=python``'s function against ``data.extra_columns``); a ValueError naming the keys is a
    config error."""

    def check_other_sections(self, sections: dict[str, Any]) -> None: ...


@runtime_checkable
class PlansOptimizerSteps(Protocol):
    """Optional ability of an algorithm config (without it, a step takes one optimizer step per trained engine)."""

    def optimizer_steps_per_step(self, train_batch_size: int) -> int:
        """Optimizer steps a training step takes on each trained engine for ``train_batch_size`` prompts (LR
        schedules are sized by it); ValueError naming the key as typed (checked when composed) when the batch
        cannot be so cut."""
