"""``resharder=broadcast`` between real processes over a real gloo group: one sender, two receivers
get bit-equal tensors (names, dtypes, shapes, order); failures on either side keep the group in
step; an FSDP actor's trained weights end up in an hf rollout engine in another process."""

from __future__ import annotations

import os
import socket
import time

import pytest
import torch
import torch.multiprocessing as mp
from rlloom.plugins.registry import Registry
from rlloom.protocols import DistributedResharder

from rlloom_resharders import BroadcastResharder, BroadcastResharderConfig

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def run_members(fn, nprocs: int, *args, timeout_s: float = 120.0) -> None:
    """``fn(index, *args)`` in ``nprocs`` spawned processes; a child's exception is re-raised here."""
    context = mp.start_processes(fn, args=args, nprocs=nprocs, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    while not context.join(timeout=1.0):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"sync group members still running after {timeout_s:g} s")


def make_tensors(seed: int) -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        ("layers.0.weight", torch.randn(4, 3, generator=g)),
        ("layers.0.bias", torch.randn(3, generator=g).to(torch.bfloat16)),
        ("positions", torch.randint(-2**40, 2**40, (5,), generator=g)),  # needs all 64 bits
        ("scale", torch.tensor(2.5 + seed)),  # 0-d
        ("transposed", torch.randn(3, 5, generator=g).t()),  # not contiguous
        ("empty", torch.zeros(0, 4)),
        ("mask", torch.tensor([True, False, True])),
        ("ünïcode.权重", torch.randn(2, 2, generator=g, dtype=torch.float64)),
    ]


def as_bytes(tensor: torch.Tensor) -> bytes:
    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def assert_same(received: list[tuple[str, torch.Tensor]], expected: list[tuple[str, torch.Tensor]]) -> None:
    assert [name for name, _ in received] == [name for name, _ in expected]
    for (name, got), (_, want) in zip(received, expected):
        assert (got.dtype, got.shape) == (want.dtype, want.shape), name
        assert as_bytes(got) == as_bytes(want), name


class ListWeights:
    """A train engine's ``named_weights`` over a fixed list; ``fail_after`` raises mid-stream."""

    def __init__(self, tensors, fail_after: int | None = None) -> None:
        self.tensors, self.fail_after = tensors, fail_after

    def named_weights(self):
        for index, item in enumerate(self.tensors):
            if index == self.fail_after:
                raise OSError("gather failed")
            yield item


class Collector:
    """A rollout engine's ``update_weights`` that keeps what it gets; ``fail_at`` raises on that tensor."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at = fail_at
        self.received: list[tuple[str, torch.Tensor]] = []

    def update_weights(self, named_tensors) -> None:
        for index, (name, tensor) in enumerate(named_tensors):
            if index == self.fail_at:
                raise ValueError(f"no weight named {name!r}")
            self.received.append((name, tensor.clone()))


def stream_member(index: int, port: int, out_dir: str) -> None:
    """Four syncs over one group: clean; receiver 2's engine raises; the sender's engine raises; clean."""
    torch.set_num_threads(1)
    resharder = BroadcastResharder(BroadcastResharderConfig(backend="gloo", timeout_s=60.0))
    resharder.connect(index, 3, HOST, port)
    record: dict = {"stats": [], "received": [], "errors": []}
    rounds = [(0, None, None), (1, None, 1), (2, 1, None), (3, None, None)]  # (seed, fail_after, fail_at)
    for round_, (seed, fail_after, fail_at) in enumerate(rounds):
        try:
            if index == 0:
                record["stats"].append(resharder.send(ListWeights(make_tensors(seed), fail_after)))
            else:
                collector = Collector(fail_at if index == 2 else None)
                try:
                    record["stats"].append(resharder.receive(collector))
                finally:
                    record["received"].append(collector.received)
        except (OSError, ValueError, RuntimeError) as error:
            record["errors"].append((round_, type(error).__name__, str(error)))
    resharder.close()
    torch.save(record, os.path.join(out_dir, f"member-{index}.pt"))


def test_one_sender_two_receivers_bit_equal_and_in_step(tmp_path):
    run_members(stream_member, 3, free_port(), str(tmp_path))
    sender, *receivers = (torch.load(tmp_path / f"member-{i}.pt", weights_only=False) for i in range(3))

    sizes = {seed: sum(t.numel() * t.element_size() for _, t in make_tensors(seed)) for seed in (0, 1, 3)}
    assert sizes[0] == 4 * 3 * 4 + 3 * 2 + 5 * 8 + 4 + 3 * 5 * 4 + 0 + 3 + 2 * 2 * 8
    assert [(s.num_tensors, s.num_bytes) for s in sender["stats"]] == [(8, sizes[0]), (8, sizes[1]), (8, sizes[3])]
    assert sender["errors"] == [(2, "OSError", "gather failed")]

    one, two = receivers
    assert [(s.num_tensors, s.num_bytes) for s in one["stats"]] == [(8, sizes[0]), (8, sizes[1]), (8, sizes[3])]
    largest = {seed: max(t.numel() * t.element_size() for _, t in make_tensors(seed)) for seed in (0, 1, 3)}
    assert [s.max_tensor_bytes for s in sender["stats"]] == [largest[0], largest[1], largest[3]]
    assert [s.max_tensor_bytes for s in one["stats"]] == [largest[0], largest[1], largest[3]]
    assert all(s.peak_extra_bytes is None for s in sender["stats"])  # nothing of this process on a GPU
    for round_, seed in ((0, 0), (1, 1), (3, 3)):
        assert_same(one["received"][round_], make_tensors(seed))
    assert_same(two["received"][0], make_tensors(0))
    assert_same(two["received"][3], make_tensors(3))  # still in step after both failures
    # Round 1: receiver 2's engine stopped at tensor 1 (the rest was drained); round 2: the sender's
    # engine failed after one tensor, which both receivers were handed before the abort.
    assert_same(two["received"][1], make_tensors(1)[:1])
    assert_same(one["received"][2], make_tensors(2)[:1])
    assert_same(two["received"][2], make_tensors(2)[:1])
    assert two["errors"][0] == (1, "ValueError", "no weight named 'layers.0.bias'")
    for record in receivers:
        round_, kind, message = record["errors"][-1]
        assert (round_, kind) == (2, "RuntimeError") and "sender (sync rank 0) failed" in message


def test_sync_in_one_process_streams_like_in_process():
    collector = Collector()
    stats = BroadcastResharder(BroadcastResharderConfig()).sync(ListWeights(make_tensors(0)), collector)
    assert_same(collector.received, make_tensors(0))
    assert (stats.num_tensors, stats.num_bytes) == (8, sum(t.numel() * t.element_size() for _, t in make_tensors(0)))
    assert stats.max_tensor_bytes == max(t.numel() * t.element_size() for _, t in make_tensors(0))


def test_receive_needs_a_group_and_send_only_on_rank_0_when_connected():
    resharder = BroadcastResharder(BroadcastResharderConfig())
    with pytest.raises(RuntimeError, match="connect\\(\\) with a rank >= 1"):
        resharder.receive(Collector())
    # Not a member (another rank of the train pool): send only runs the engine's collective gather.
    stats = resharder.send(ListWeights(make_tensors(0)))
    assert stats.num_tensors == 8


def test_unsupported_dtype_is_named():
    from rlloom_resharders.broadcast import encode_header

    with pytest.raises(ValueError, match="'z' has dtype torch.complex64"):
        encode_header("z", torch.zeros(2, dtype=torch.complex64))


def test_config_validation_names_the_key_and_choices():
    with pytest.raises(ValueError, match="resharder.backend='mpi': must be one of auto, gloo, nccl"):
        BroadcastResharderConfig(backend="mpi")
    with pytest.raises(ValueError, match="resharder.timeout_s=0"):
        BroadcastResharderConfig(timeout_s=0)


def test_registered_and_distributed():
    component = Registry().get("resharder", "broadcast")
    assert component.distribution == "rlloom-resharders"
    assert component.config is BroadcastResharderConfig
    resharder = component.factory(BroadcastResharderConfig())
    assert isinstance(resharder, BroadcastResharder) and isinstance(resharder, DistributedResharder)


def nccl_member(index: int, port: int, out_dir: str) -> None:
    """Rank ``index`` on GPU ``index``: one sync of ``make_tensors(0)`` over NCCL."""
    torch.cuda.set_device(index)
    resharder = BroadcastResharder(BroadcastResharderConfig(backend="nccl", timeout_s=60.0))
    resharder.connect(index, 2, HOST, port)
    if index == 0:
        resharder.send(ListWeights(make_tensors(0)))
    else:
        collector = Collector()
        resharder.receive(collector)
        received = [(name, tensor.cpu()) for name, tensor in collector.received]
        torch.save({"received": received, "device": collector.received[0][1].device.type},
                   os.path.join(out_dir, "nccl.pt"))
    resharder.close()


@pytest.mark.cuda("backend=nccl between two ranks, one GPU each (NCCL refuses two ranks on one GPU)", gpus=2)
def test_nccl_between_two_gpus(tmp_path):
    run_members(nccl_member, 2, free_port(), str(tmp_path))
    record = torch.load(tmp_path / "nccl.pt", weights_only=False)
    assert record["device"] == "cuda"
    assert_same(record["received"], make_tensors(0))


def test_nccl_without_nccl_is_refused():
    if torch.distributed.is_nccl_available():
        pytest.skip("this torch build has NCCL")
    with pytest.raises(RuntimeError, match="resharder.backend=nccl: this torch build has no NCCL"):
        BroadcastResharder(BroadcastResharderConfig(backend="nccl")).connect(0, 1, HOST, free_port())


# ---------------------------------------------------------------------------------- real engines


@pytest.fixture(scope="module")
def tiny_model_path(tmp_path_factory) -> str:
    from rlloom_models.config import TinyModelConfig
    from rlloom_models.tiny import tiny_model_path as build_tiny

    return build_tiny(TinyModelConfig(cache_dir=str(tmp_path_factory.mktemp("broadcast-models"))))


def advantage_loss(micro, outputs, stats):
    mask = micro["response_mask"].float()
    loss = -(micro["advantages"] * outputs["log_probs"] * mask).sum() / stats.num_tokens
    return loss, {"pg_loss": float(loss.detach())}


def engine_member(index: int, port: int, model_path: str, out_dir: str) -> None:
    """Rank 0: an FSDP actor (world size 1) takes one optimizer step, then sends; rank 1: an hf
    rollout engine receives."""
    import torch.distributed as dist
    from rlloom import EngineSpec, SamplingParams
    from rlloom_hf import HFRolloutConfig, HFRolloutEngine

    torch.set_num_threads(1)
    rollout = HFRolloutEngine(HFRolloutConfig(), EngineSpec(model_path, "rollout", 0))
    resharder = BroadcastResharder(BroadcastResharderConfig(backend="gloo", timeout_s=120.0))
    if index == 0:
        from rlloom.data import PromptRecord
        from rlloom_trainer.prompts import PromptEncoder
        from rlloom_fsdp.config import FSDPConfig
        from rlloom_fsdp.engine import FSDPTrainEngine

        actor = FSDPTrainEngine(FSDPConfig(lr=1e-2, micro_batch_size=4), EngineSpec(model_path, "actor", 0, 10))
        prompts = PromptEncoder(rollout.tokenizer, 64).encode([PromptRecord(t, None, "t") for t in ("Hi:", "A:")])
        batch = rollout.generate(prompts, SamplingParams(n=2, max_new_tokens=6, seed=0))
        batch["advantages"] = torch.tensor([1.0, -1.0, 1.0, -1.0]).unsqueeze(1) * batch["response_mask"].float()
        actor.train_step(batch, advantage_loss)
        resharder.connect(0, 2, HOST, port)
        stats = resharder.send(actor)
        default_world = dist.get_world_size()  # the FSDP engine's own group, untouched by the sync group
        result = {"stats": stats, "weights": dict(actor.named_weights()), "default_world": default_world}
        actor.close()
    else:
        resharder.connect(1, 2, HOST, port)
        stats = resharder.receive(rollout)
        result = {"stats": stats, "weights": {k: v.clone() for k, v in rollout.model.state_dict().items()}}
    resharder.close()
    torch.save(result, os.path.join(out_dir, f"engine-{index}.pt"))


def test_fsdp_actor_to_hf_rollout_in_another_process(tiny_model_path, tmp_path):
    from safetensors.torch import load_file

    run_members(engine_member, 2, free_port(), tiny_model_path, str(tmp_path))
    sender, receiver = (torch.load(tmp_path / f"engine-{i}.pt", weights_only=False) for i in range(2))
    initial = load_file(os.path.join(tiny_model_path, "model.safetensors"))
    trained = sender["weights"]

    assert sender["default_world"] == 1
    assert set(trained) == set(initial)  # Hugging Face names, tied lm_head left out
    assert any(not torch.equal(trained[name], initial[name]) for name in trained)  # the step changed weights
    for name, tensor in trained.items():
        assert torch.equal(receiver["weights"][name], tensor), name
    expected_bytes = sum(t.numel() * t.element_size() for t in trained.values())
    assert (sender["stats"].num_tensors, sender["stats"].num_bytes) == (len(trained), expected_bytes)
    assert (receiver["stats"].num_tensors, receiver["stats"].num_bytes) == (len(trained), expected_bytes)
