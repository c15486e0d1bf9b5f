"""Small value types exchanged between the controller and the plugins: plain dataclasses, so that they
pickle (Ray ships them) and print well in logs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class SamplingParams:
    """How a :class:`~rlloom.protocols.RolloutEngine` samples ``n`` responses per prompt row.

    ``temperature == 0``: greedy (``top_p``/``top_k`` ignored); ``top_k == -1`` and ``top_p == 1.0`` filter
    nothing. ``seed``: a call reproducible for a given engine and batch (``None``: the engine's generator
    state). ``first_prompt``: the index of this batch's first prompt in the whole call it is a piece of
    (randomness is keyed by seed, prompt index, response index, so a call split by prompts samples what the
    whole call would). ``ignore_eos``: every response has ``max_new_tokens`` tokens (benchmarks).
    ``stop_token_ids``: ids that end a response besides the model's own (kept in it; with ``ignore_eos`` too)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 32
    seed: int | None = None
    first_prompt: int = 0
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        checks = {"n": (self.n >= 1, ">= 1"), "temperature": (self.temperature >= 0, ">= 0"),
                  "top_p": (0.0 < self.top_p <= 1.0, "in (0, 1]"),
                  "top_k": (self.top_k == -1 or self.top_k >= 1, "-1 (off) or >= 1"),
                  "max_new_tokens": (self.max_new_tokens >= 1, ">= 1"),
                  "first_prompt": (self.first_prompt >= 0, ">= 0")}
        for key, (ok, rule) in checks.items():
            if not ok:
                raise ValueError(f"SamplingParams.{key} must be {rule}, got {getattr(self, key)}")
        if not isinstance(self.stop_token_ids, tuple) or any(
                isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in self.stop_token_ids):
            raise ValueError(f"SamplingParams.stop_token_ids must be a tuple of token ids, got {self.stop_token_ids!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def filtered(self) -> bool:
        """Whether sampling draws from a top-k / top-p filtered distribution (never when greedy)."""
        return not self.greedy and (self.top_k != -1 or self.top_p < 1.0)

    @property
    def policy_temperature(self) -> float:
        """T of the sampling policy ``softmax(logits / T)``: the temperature, or 1 when greedy."""
        return 1.0 if self.greedy else float(self.temperature)


@dataclass(frozen=True)
class Completion:
    """The answer to one prompt of a per-request call (:class:`~rlloom.protocols.AsyncRolloutEngine`), for
    each of the ``sampling.n`` responses: ``token_ids`` (a final stop id included, no padding), ``log_probs``
    (as the batch call's ``rollout_log_probs``; None when the engine leaves them out) and ``finish_reasons``
    (``"length"`` when it has ``max_new_tokens`` tokens, else ``"stop"``)."""

    token_ids: list[list[int]]
    log_probs: list[list[float]] | None
    finish_reasons: list[str]


@dataclass(frozen=True)
class Turn:
    """One assistant turn (:meth:`~rlloom.protocols.Episode.assistant_turn`): its text (special tokens dropped),
    its token ids as sampled, ``finish_reason`` (``"stop"``: a stop token; ``"length"``: the turn's budget)."""

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str


@dataclass(frozen=True)
class EnvStep:
    """What :meth:`~rlloom.protocols.Environment.step` returns: the observation shown to the model next
    (None: nothing to show), the reward of the action, and whether the episode is over."""

    observation: str | None
    reward: float
    done: bool


@dataclass
class RewardResult:
    """What a :class:`~rlloom.protocols.RewardFn` returns for B responses: ``scores`` [B] float32; ``token_level``
    [B, R] float32 or None (its row sums are the scores; used instead of ``scores`` on the last token);
    ``components``, named [B] float32 tensors (``{"correct": ..., "format": ...}``: ``reward/<name>/mean``);
    ``num_errors`` / ``num_timeouts``, rows whose verifier raised or ran out of time (scored with the
    function's fallback value, never fatal); ``info``, per-row extras (lists of length B) for dumps."""

    scores: torch.Tensor
    token_level: torch.Tensor | None = None
    components: dict[str, torch.Tensor] = field(default_factory=dict)
    num_errors: int = 0
    num_timeouts: int = 0
    info: dict[str, list] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.scores.dim() != 1:
            raise ValueError(f"RewardResult.scores must be 1-D [B], got shape {tuple(self.scores.shape)}")
        for name, values in self.components.items():
            if values.shape != self.scores.shape:
                raise ValueError(f"RewardResult.components[{name!r}] has shape {tuple(values.shape)}, "
                                 f"expected {tuple(self.scores.shape)}")


@dataclass(frozen=True)
class SyncStats:
    """What one train → rollout weight sync moved and how long it took. ``max_tensor_bytes``: the largest
    tensor streamed (the most a streaming resharder holds at once beyond the engines' weights);
    ``peak_extra_bytes``: on CUDA, the measured peak of allocated device memory during the sync above
    what was allocated before it (None where the train engine is not on a GPU of this process)."""

    num_tensors: int
    num_bytes: int
    seconds: float
    max_tensor_bytes: int = 0
    peak_extra_bytes: int | None = None


@dataclass(frozen=True)
class EngineSpec:
    """What every engine factory is told: ``model_path``, a local Hugging Face folder (config, weights,
    tokenizer); ``role``, what it serves as (``"actor"``, ``"ref"``, ``"critic"``, ``"rollout"``); the run's
    base ``seed``; ``total_train_steps``, the optimizer steps of the run (LR schedules; 0: unknown);
    ``device``, ``trainer.device``, resolved where the engine runs
    (:func:`rlloom_enginekit.devices.role_device`; the engine config's own ``device`` wins)."""

    model_path: str
    role: str
    seed: int = 0
    total_train_steps: int = 0
    device: str = "cpu"


@dataclass(frozen=True)
class RankCall:
    """What one rank of a worker group runs: ``method(*args, **kwargs)``; its result travels back only if
    ``keep_result`` (:class:`~rlloom.protocols.DispatchMode`)."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    keep_result: bool = True


STANDARD_ROLES = ("actor", "ref", "critic", "rollout", "reward")
"""The roles every algorithm may use undeclared (``ref``, ``critic`` when ``needs_reference``/``needs_critic``)."""

ROLE_KINDS = {"train_engine": ("actor", "ref", "critic"), "reward": ()}
"""A declared role's kind -> what its engine may serve as (:attr:`Role.serves_as`)."""


@dataclass(frozen=True)
class Role:
    """A role an algorithm adds to :data:`STANDARD_ROLES`, declared on its config class
    (:class:`~rlloom.protocols.DeclaresRoles`): the run builds, places, checkpoints and validates it with no
    change to the core. ``name``: what the step passes to the stages (``ctx.score(batch, role="cost")``),
    ``launcher.mapping``'s key, a train engine's folder in checkpoints. ``kind``: ``"train_engine"``, built
    from the run's ``train_engine`` choice as a ``serves_as`` engine (``"critic"``: a value head), trained
    unless it serves as ``ref``; or ``"reward"``, built from a config group of its own, named ``name``, whose
    options are the ``reward`` group's and ``none``: a run of the algorithm must choose one, others leave ``none``."""

    name: str
    kind: str
    serves_as: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ROLE_KINDS:
            raise ValueError(f"role {self.name!r}: kind {self.kind!r}; kinds are {', '.join(ROLE_KINDS)}")
        if self.name in STANDARD_ROLES or not self.name.isidentifier():
            raise ValueError(f"role {self.name!r}: a declared role needs a new identifier, not one of "
                             f"{', '.join(STANDARD_ROLES)}")
        serves = ROLE_KINDS[self.kind]
        if (self.serves_as not in serves) if serves else self.serves_as is not None:
            raise ValueError(f"role {self.name!r} ({self.kind}): serves_as={self.serves_as!r}; "
                             + (f"choose one of {', '.join(serves)}" if serves else "a reward function serves as none"))

    @property
    def trained(self) -> bool:
        """Whether its engine is trained (and saved in checkpoints)."""
        return self.kind == "train_engine" and self.serves_as != "ref"


@dataclass(frozen=True)
class RoleSpec:
    """A picklable description of one role, so a launcher can build it anywhere
    (:func:`rlloom.controller.roles.build_role`): ``role``, a :data:`STANDARD_ROLES` name, a declared
    :class:`Role`'s or ``"resharder"``; ``kind`` and ``name``, the registry entry (``"train_engine"``,
    ``"fsdp"``); ``cfg``, its config; ``engine``, the :class:`EngineSpec` of an engine factory, else None."""

    role: str
    kind: str
    name: str
    cfg: Any
    engine: EngineSpec | None = None


@dataclass(frozen=True)
class MiniBatchStats:
    """Global counts of the mini-batch one optimizer step is taken on, over all data-parallel ranks: a loss
    divides by these, not by its micro-batch's, so that micro-batching and data parallelism do not change it.
    ``num_tokens``: Σ response_mask; ``num_seqs``: the sequences; ``num_nonempty_seqs``: those with at least
    one response token; ``max_response_len``: the padded response length R."""

    num_tokens: int
    num_seqs: int
    num_nonempty_seqs: int
    max_response_len: int


class ClipLossTerms(NamedTuple):
    """Per-token outputs of a policy loss (:class:`rlloom.protocols.PolicyLoss`), all [B, R] and 0 where
    the mask is 0."""

    loss: torch.Tensor
    """The clipped policy-gradient loss L_t."""
    clipped: torch.Tensor
    """1.0 where the clipped term is active (−A·clip(ρ) > −A·ρ): averaged, ``pg_clipfrac``."""
    dual_clipped: torch.Tensor
    """1.0 where the dual clip is active (A < 0 and −A·c < the clipped loss): ``pg_clipfrac_lower``."""
    ppo_kl: torch.Tensor
    """log π_old − log π per token: averaged, ``ppo_kl``."""
