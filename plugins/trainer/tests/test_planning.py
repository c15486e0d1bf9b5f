"""``rlloom plan`` (rlloom_trainer.planning): hardware descriptions, the memory model, the profile's fit, the
step-time model and the search, against hand values; the plan's overrides composed by the config loader."""

from __future__ import annotations

import dataclasses

import pytest
from rlloom.cli import main
from rlloom.config import compose_config
from rlloom.errors import ConfigError

from rlloom_trainer.commands.plan import config_keys, kept_overrides, split_cluster
from rlloom_trainer.planning.explain import plan_report
from rlloom_trainer.planning.hardware import Cluster, DeviceSpec, parse_cluster
from rlloom_trainer.planning.memory import (
    HEAD_CHUNK_BYTES,
    NAMED_SHAPES,
    ModelShape,
    packing_mask_bytes,
    rollout_bytes_per_device,
    train_bytes_per_device,
)
from rlloom_trainer.planning.profile import (
    Profile,
    doubled_overrides,
    fit,
    fitted_rates,
    measured_workload,
    pool_scaling,
    quickest,
    stage_samples,
    threads_per_worker,
)
from rlloom_trainer.planning.rates import packing_mask, plan_rates, plan_workload
from rlloom_trainer.planning.search import candidates
from rlloom_trainer.planning.steptime import (
    Placement,
    Rates,
    StageCost,
    Workload,
    mask_per_device,
    memory_per_device,
    predict,
)



def test_named_clusters():
    one = parse_cluster("8xH100")
    assert (one.nodes, one.devices_per_node, one.devices, one.device.name) == (1, 8, 8, "H100")
    assert one.device.memory_bytes == 80e9 and one.device.bf16_flops == 989.4e12
    two = parse_cluster("2x8xH200")
    assert (two.nodes, two.devices, two.device.memory_bytes) == (2, 16, 141e9)


@pytest.mark.parametrize(("text", "message"), [
    ("8xB300", "cluster=8xB300: unknown device 'B300'; known: H100, H200, A100"),
    ("eight", "cluster=eight: expected NODESxDEVICESxNAME"),
    ("0xH100", "cluster=0xH100: needs at least one node of at least one device"),
])
def test_bad_cluster_names_say_what_is_expected(text, message):
    with pytest.raises(ValueError) as error:
        parse_cluster(text)
    assert str(error.value).startswith(message)


def test_a_cluster_file_names_its_missing_fields(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text("nodes: 2\ndevices_per_node: 4\ndevice: A100\nnetwork_bandwidth: 25.0e9\n")
    cluster = parse_cluster(str(path))
    assert (cluster.devices, cluster.device.name, cluster.network_bandwidth) == (8, "A100", 25e9)
    path.write_text("nodes: 1\ndevice: {name: X, bf16_flops: 1.0e15, memory_bytes: 9.6e10, memory_bandwidth: 4.0e12}\n"
                    "network_bandwidth: 5.0e10\n")
    with pytest.raises(ValueError, match=rf"cluster file {path}: missing field 'devices_per_node' \(fields: nodes,"):
        parse_cluster(str(path))
    path.write_text("nodes: 1\ndevices_per_node: 8\nnetwork_bandwidth: 5.0e10\n"
                    "device: {name: X, bf16_flops: 1.0e15, memory_bytes: 9.6e10, memory_bandwidth: 4.0e12}\n")
    with pytest.raises(ValueError, match=rf"cluster file {path}, device: missing field 'link_bandwidth'"):
        parse_cluster(str(path))


def test_qwen25_05b_shape_and_memory():
    shape = ModelShape.named("qwen2.5-0.5b")
    # Qwen2.5-0.5B has 494,032,768 parameters; q/k/v biases (1,536 a layer) are left out here.
    assert shape.params() == 494_032_768 - 24 * (896 + 2 * 128)
    assert shape.kv_bytes_per_token() == 2 * 24 * 2 * 64 * 2  # 12,288 bytes
    state = 16 * shape.params() / 8
    gathered = 4 * shape.layer_params()
    head = 128 * 2**20
    assert train_bytes_per_device(shape, shards=8, tokens=4096) == pytest.approx(
        state + gathered + 4096 * 24 * 34 * 896 + head)
    assert train_bytes_per_device(shape, shards=8, tokens=4096, sequence_parallel=2) == pytest.approx(
        state + gathered + 2048 * 24 * 34 * 896 + head)
    assert rollout_bytes_per_device(shape, tensor_parallel=2, tokens_in_flight=1000) == pytest.approx(
        (2 * shape.params() + 1000 * 12_288) / 2)


def test_qwen25_7b_shape():
    shape = ModelShape.named("qwen2.5-7b")
    # Qwen2.5-7B has 7,615,616,512 parameters; its q/k/v biases (3,584 + 2 x 512 a layer) are left out here.
    assert shape.params() == 7_615_616_512 - 28 * (3584 + 2 * 512)
    assert set(NAMED_SHAPES) == {"qwen2.5-0.5b", "qwen2.5-7b"}
    with pytest.raises(ValueError, match="--shape qwen-9: not a known shape"):
        ModelShape.named("qwen-9")


# ---------------------------------------------------------------------------------------------- profile


def metrics_row(step: int, rows: int, fixed: dict, slope: dict, response: float = 4.0, prompt: float = 20.0) -> dict:
    """A metrics.jsonl row whose stage times are fixed + slope * units."""
    tokens = rows * (prompt + response)
    gen = fixed["gen"] + slope["gen"] * rows * response
    train = fixed["train"] + slope["train"] * tokens
    ref = fixed["log_prob"] + slope["log_prob"] * tokens
    sync = fixed["sync"] + slope["sync"] * 1000.0
    return {"step": step, "response_length/mean": response, "perf/total_tokens": tokens, "timing_s/gen": gen,
            "timing_s/update_actor": train, "timing_s/ref": ref, "timing_s/update_weights": sync,
            "perf/weight_sync_bytes": 1000.0, "timing_s/step": gen + train + ref + sync + 0.5}


def test_profile_fits_each_stage_from_the_logged_timings():
    fixed = {"gen": 0.1, "train": 0.2, "log_prob": 0.05, "sync": 0.01}
    slope = {"gen": 1e-3, "train": 2e-4, "log_prob": 5e-5, "sync": 1e-6}
    samples: dict[str, list] = {}
    for rows in (8, 16):
        run = [metrics_row(step, rows, fixed, slope, response=3.0 + step % 2) for step in range(1, 5)]
        for stage, values in stage_samples(run, rows).items():
            samples.setdefault(stage, []).extend(values)
    assert len(samples["gen"]) == 6  # step 1 (warm-up) left out, 3 steps a run
    quick = quickest(stage_samples(run, 16))
    assert quick["gen"] == [min(samples["gen"][3:], key=lambda sample: sample[1])] and len(quick["train"]) == 1
    rates = fitted_rates(samples, devices=2)
    for stage in ("gen", "train", "log_prob"):
        cost = getattr(rates, stage)
        assert cost.fixed_s == pytest.approx(fixed[stage]) and cost.device_s == pytest.approx(2 * slope[stage])
    assert rates.sync.fixed_s + 1000 * rates.sync.device_s == pytest.approx(0.011)  # one size: through the origin
    assert rates.other_s == pytest.approx(0.5)
    workload = measured_workload(run, prompts=2, n=8, max_new_tokens=4)
    assert (workload.rows, workload.log_prob_passes, workload.trains, workload.reference) == (16, 1, 1, True)
    assert (workload.prompt_tokens, workload.response_tokens) == (pytest.approx(20.0), pytest.approx(10 / 3))


def test_a_doubled_pool_gives_each_stage_its_scaling_and_the_sync_its_gather_bandwidth():
    fixed = {"gen": 0.1, "train": 0.2, "log_prob": 0.05, "sync": 0.01}
    slope = {"gen": 1e-3, "train": 2e-4, "log_prob": 5e-5, "sync": 1e-6}
    # On 2 devices: gen at 0.6 of perfect sharing, train at 0.8 with 0.05 s more a call, log-probs twice as fast
    # as perfect sharing and 0.01 s less a call, the sync 5 ms longer: 1000 bytes / 2 gathered at 100 kB/s.
    fixed_2 = {"gen": 0.1, "train": 0.25, "log_prob": 0.04, "sync": 0.015}
    slope_2 = {"gen": 1e-3 / (2 * 0.6), "train": 2e-4 / (2 * 0.8), "log_prob": 5e-5 / 4, "sync": 1e-6}
    samples: dict[str, list] = {}
    doubled: dict[str, list] = {}
    for rows in (8, 16):
        for pooled, costs in ((samples, (fixed, slope)), (doubled, (fixed_2, slope_2))):
            run = [metrics_row(step, rows, *costs) for step in (1, 2, 3)]
            for stage, values in quickest(stage_samples(run, rows)).items():
                pooled.setdefault(stage, []).extend(values)
    rates = fitted_rates(samples, devices=1, doubled=doubled)
    scaling = [value for cost in (rates.gen, rates.train, rates.log_prob) for value in (cost.efficiency, cost.growth_s)]
    assert scaling == pytest.approx([0.6, 0.0, 0.8, 0.05, 2.0, -0.01], abs=1e-12)
    assert rates.gen.device_growth_s == pytest.approx(2 * 1e-3 / 1.2 - 1e-3)  # device-seconds of a unit on 2 - on 1
    assert rates.other_growth_s == 0.0
    assert (rates.gen.base_devices, rates.sync.base_devices) == (1, 1)
    assert rates.gather_bandwidth == pytest.approx(1000 / 2 / 0.005)  # sync through the origin: 0.011 s on 1
    assert rates.train.seconds(16 * 24, 2) == pytest.approx(0.25 + 2e-4 * 16 * 24 / (2 * 0.8))  # the doubled fit
    assert pool_scaling(0.1, 1e-3, 0.3, 1e-3, devices=2) == (pytest.approx(0.2), pytest.approx(2e-3))  # no speed-up
    assert StageCost(0.1, 2e-3, device_growth_s=2e-3).efficiency == 0.5
    alone = fitted_rates(samples, devices=1)  # no doubled runs: perfect sharing, no growth, the cluster's link
    assert (alone.gen.device_growth_s, alone.gen.growth_s, alone.other_growth_s, alone.gather_bandwidth) == (0, 0, 0, 0)
    shape = ModelShape.named("qwen2.5-0.5b")
    profile = Profile("cpu", 1, shape, WORKLOAD, rates, {8: 1.5, 16: 2.0}, ["preset=tiny"], 1.4, {1: 1, 2: 1})
    assert Profile.from_json(profile.to_json()) == profile
    planned = plan_rates(shape, cpu_cluster(), profile)
    assert planned.train == rates.train and planned.gather_bandwidth == rates.gather_bandwidth  # same parameters
    assert planned.source == ("profile on cpu; data-parallel efficiency (pools of 1 -> 2, 1 -> 1 threads a worker): "
                              "gen 0.6 +0.000 s, train 0.8 +0.050 s, log-probs 2 -0.010 s a call, other +0.000 s; "
                              "weight gather 0.1 MB/s")


def test_the_doubled_pool_keeps_the_cpu_count():
    base = ["preset=tiny", "launcher=ray", "launcher.num_cpus=2"]
    launcher = compose_config(base).sections["launcher"]
    assert doubled_overrides(launcher, cpus=2) == ["++launcher.resource_pools.global=2"]  # 1 CPU, 1 thread each
    wide = compose_config([*base, "launcher.cpus_per_worker=2", "launcher.threads_per_worker=2"]).sections["launcher"]
    assert threads_per_worker(wide) == 2
    extra = doubled_overrides(wide, cpus=2)
    assert extra == ["++launcher.resource_pools.global=2", "launcher.cpus_per_worker=1",
                     "launcher.threads_per_worker=1"]
    doubled = compose_config([*base, "launcher.cpus_per_worker=2", "launcher.threads_per_worker=2", *extra])
    assert (doubled.sections["launcher"].resource_pools, threads_per_worker(doubled.sections["launcher"])) == (
        {"global": 2}, 1)
    split = [*base, "+launcher.resource_pools.gen=1", "+launcher.mapping.rollout=gen"]
    extra = doubled_overrides(compose_config(split).sections["launcher"], cpus=2)
    assert extra == ["++launcher.resource_pools.gen=2", "++launcher.resource_pools.global=2",
                     "launcher.cpus_per_worker=0.5"]
    assert compose_config([*split, *extra]).sections["launcher"].resource_pools == {"gen": 2, "global": 2}


def test_fit_never_returns_negative_costs():
    assert fit([(1.0, 0.5), (2.0, 0.4)]) == (pytest.approx(0.45), 0.0)  # timings that fall: a mean, no slope
    assert fit([(1.0, 0.0), (2.0, 2.0)]) == (0.0, pytest.approx(0.8))  # negative intercept: through the origin
    assert fit([]) == (0.0, 0.0)


# ---------------------------------------------------------------------------------------------- step time

RATES = Rates(gen=StageCost(0.5, 1e-3), train=StageCost(0.2, 4e-3), log_prob=StageCost(0.1, 1e-3),
              sync=StageCost(0.05, 1e-9), other_s=0.3)
WORKLOAD = Workload(prompts=4, n=8, prompt_tokens=100.0, response_tokens=150.0, max_new_tokens=200,
                    log_prob_passes=1, trains=1, reference=True, sync_bytes=1e6)


def cpu_cluster(devices: int = 2, memory: float = 1e12):
    return Cluster(1, devices, DeviceSpec("cpu", 1e11, memory, 2e10, 1e9), 1e9)


def test_colocated_serializes_and_async_split_overlaps():
    shape = ModelShape.named("qwen2.5-0.5b")
    cluster = cpu_cluster()
    tokens, generated = 32 * 250, 32 * 150
    one = predict(Placement(1), shape, WORKLOAD, RATES, cluster)
    stages = {"gen": 0.5 + 1e-3 * generated, "log_prob": 0.1 + 1e-3 * tokens, "train": 0.2 + 4e-3 * tokens,
              "sync": 0.05 + 1e-3, "offload": 0.0, "other": 0.3}
    assert one.stages == pytest.approx(stages) and one.step_s == pytest.approx(sum(stages.values()))
    two = predict(Placement(2), shape, WORKLOAD, RATES, cluster)
    fsdp = 8 * shape.params() / 2 / 1e9  # one micro-batch's gathers and reduce-scatter over 2 shards
    assert two.stages["train"] == pytest.approx(max(0.2 + 4e-3 * tokens / 2, fsdp))
    assert two.stages["sync"] == pytest.approx(0.05 + 1e-3 + 1e6 / 2 / 1e9)  # the other rank's half gathered
    split = Placement(1, 1)
    sync = 0.05 + 1e-3 + 1e6 / 1e9  # the link between the pools
    serial = predict(split, shape, WORKLOAD, RATES, cluster)
    assert serial.stages["sync"] == pytest.approx(sync)
    assert serial.step_s == pytest.approx(sum(stages.values()) - stages["sync"] + sync)
    overlapped = predict(split, shape, WORKLOAD, RATES, cluster, async_mode="one_step_off")
    assert overlapped.step_s == pytest.approx(max(stages["gen"], stages["log_prob"] + stages["train"] + 0.3) + sync)
    assert "needs the rollout on a pool of its own" in predict(Placement(2), shape, WORKLOAD, RATES, cluster,
                                                               async_mode="fully_async").excluded


def test_stage_cost_scales_its_fixed_part_and_its_sharing_per_doubling():
    cost = StageCost(0.1, 2e-3, growth_s=0.05, device_growth_s=5e-4)  # 2.5e-3 device-seconds a unit on 2: e = 0.8
    assert cost.efficiency == pytest.approx(0.8)
    assert [cost.seconds(1000, devices) for devices in (1, 2, 4)] == pytest.approx(
        [0.1 + 2.0, 0.15 + 2.5 / 2, 0.2 + 3.0 / 4])
    measured_on_two = StageCost(0.1, 2e-3, growth_s=0.2, device_growth_s=5e-4, base_devices=2)
    assert [measured_on_two.seconds(1000, devices) for devices in (1, 2)] == pytest.approx([0.0 + 1.5, 1.1])


def test_a_profile_s_pool_scaling_and_gather_bandwidth_price_a_larger_pool():
    shape = ModelShape.named("qwen2.5-0.5b")
    rates = Rates(gen=StageCost(0.5, 1e-3, device_growth_s=1e-3), train=StageCost(0.2, 4e-3, 0.1, 1e-3),
                  log_prob=StageCost(0.1, 1e-3, device_growth_s=1e-3 / 9), sync=StageCost(0.05, 1e-9), other_s=0.3,
                  other_growth_s=0.1, gather_bandwidth=2e8)
    two = predict(Placement(2), shape, WORKLOAD, rates, cpu_cluster())
    tokens, generated = 32 * 250, 32 * 150
    assert two.stages["gen"] == pytest.approx(0.5 + 2e-3 * generated / 2)  # efficiency 0.5: no faster than on 1
    assert two.stages["log_prob"] == pytest.approx(0.1 + 1e-3 / 0.9 * tokens / 2)
    assert two.stages["train"] == pytest.approx(0.3 + 5e-3 * tokens / 2)  # FSDP's 1.98 s of gathers overlap it
    assert two.stages["sync"] == pytest.approx(0.05 + 1e-3 + 1e6 / 2 / 2e8)  # the measured gather, not the link
    assert two.stages["other"] == pytest.approx(0.4)
    on_two = dataclasses.replace(rates, sync=StageCost(0.05, 1e-9, base_devices=2))  # the sync measured on 2
    assert predict(Placement(2), shape, WORKLOAD, on_two, cpu_cluster()).stages["sync"] == pytest.approx(0.051)
    four = predict(Placement(4), shape, WORKLOAD, rates, cpu_cluster(devices=4))
    assert (four.stages["gen"], four.stages["other"]) == pytest.approx((0.5 + 3e-3 * generated / 4, 0.5))
    assert four.stages["sync"] == pytest.approx(0.05 + 1e-3 + 1e6 * 3 / 4 / 2e8)


def test_layouts_that_cannot_run_say_why():
    shape = ModelShape.named("qwen2.5-0.5b")  # 14 heads, 2 key/value heads
    cluster = cpu_cluster(devices=8)
    assert predict(Placement(4, sequence_parallel=4), shape, WORKLOAD, RATES, cluster).excluded == (
        "sequence parallel 4 does not divide the heads (14) and key/value heads (2)")
    assert predict(Placement(3, sequence_parallel=2), shape, WORKLOAD, RATES, cluster).excluded == (
        "sequence parallel 2 does not divide its pool of 3")
    assert predict(Placement(8, 4), shape, WORKLOAD, RATES, cluster).excluded == (
        "needs 12 devices, the cluster has 8")
    small = predict(Placement(1), shape, WORKLOAD, RATES, cpu_cluster(memory=8e9))
    assert small.excluded == "colocated pool needs 14.3 GB per device, over 90% of 8 GB"  # 16·P + 4·P alone: 9.9 GB


def test_offload_is_tried_on_accelerators_only():
    shape = ModelShape.named("qwen2.5-0.5b")
    keys = {"trainer.offload_train_engines"}
    assert not any(placement.offload for placement in candidates(cpu_cluster(), shape, keys, "sync"))
    on_h100 = list(candidates(parse_cluster("2xH100"), shape, keys, "sync"))
    assert {placement.colocated for placement in on_h100 if placement.offload} == {True}


def test_memory_per_device_adds_the_colocated_roles_and_offload_keeps_the_larger_phase():
    shape = ModelShape.named("qwen2.5-0.5b")
    tokens = 4000  # a rank's share of the 8,000 tokens of the step: under the budget of 4,096
    train = train_bytes_per_device(shape, 2, tokens) + 4 * shape.params() / 2 + HEAD_CHUNK_BYTES
    rollout = rollout_bytes_per_device(shape, 1, 16 * 250)
    assert memory_per_device(Placement(2), shape, WORKLOAD) == {"colocated pool": pytest.approx(train + rollout)}
    assert memory_per_device(Placement(2, offload=True), shape, WORKLOAD) == {
        "colocated pool": pytest.approx(max(train + 2 * shape.params(), rollout))}
    split = memory_per_device(Placement(2, 2), shape, WORKLOAD)
    assert split == {"train pool": pytest.approx(train), "rollout pool": pytest.approx(rollout)}


def test_the_packing_mask_is_packs_times_width_squared():
    assert packing_mask_bytes(8192, 8192, 2) == 134_217_728  # one pack of 8k tokens in bf16: 8192² · 2 = 128 MiB
    assert packing_mask_bytes(32768, 65536, 2) == 2**31  # one 32k row: 2 GiB
    assert packing_mask_bytes(8192, 4096, 2) == 67_108_864  # two packs of 4,096: 2 · 4096² · 2
    assert packing_mask_bytes(3000, 4096, 4) == 36_000_000  # one pack of 3,000 in float32: 3000² · 4
    assert packing_mask_bytes(8192, 8192, 0) == 0.0  # no mask (varlen, flex, padded)


@pytest.mark.parametrize("overrides, gpu, expected", [
    ([], True, (2, 4096)),  # sdpa, shared_prompt, auto = bf16: packs ≥ GROUP_WIDTH, 2 · 1,000-token rows = 2,000
    (["train_engine.sequence_layout=packed"], True, (2, 2000)),  # a pack at most 2 × the longest row
    (["train_engine.sequence_layout=packed"], False, (4, 2000)),  # auto is float32 on the CPU
    (["train_engine.sequence_layout=packed", "train_engine.dtype=float32"], True, (4, 2000)),
    (["train_engine.attention=varlen"], True, (0, 0.0)),  # no mask
    (["train_engine.attention=flex"], True, (0, 0.0)),  # a block mask, not counted
    (["train_engine.sequence_layout=padded"], True, (0, 0.0)),  # the model's [b, L] padding mask, not counted
])
def test_the_config_says_whether_and_in_what_dtype_a_mask_is_built(overrides, gpu, expected):
    engine = compose_config(overrides).sections["train_engine"]
    assert packing_mask(engine, gpu, longest_row=1000) == expected


def test_sequence_parallelism_divides_activations_but_not_the_mask():
    shape = ModelShape.named("qwen2.5-0.5b")
    workload = dataclasses.replace(WORKLOAD, prompts=64, mask_element_bytes=2, widest_pack=8192)  # 128,000 tokens
    whole, shared = Placement(4, micro_batch_tokens=8192), Placement(4, sequence_parallel=4, micro_batch_tokens=8192)
    assert mask_per_device(whole, workload) == mask_per_device(shared, workload) == 134_217_728  # 8192² · 2
    activations = 8192 * shape.layers * 34 * shape.hidden  # one micro-batch's, of which SP 4 holds a quarter
    assert (memory_per_device(whole, shape, workload)["colocated pool"]
            - memory_per_device(shared, shape, workload)["colocated pool"]) == pytest.approx(activations * 3 / 4)
    unmasked = dataclasses.replace(workload, mask_element_bytes=0)
    assert (memory_per_device(shared, shape, workload)["colocated pool"]
            - memory_per_device(shared, shape, unmasked)["colocated pool"]) == pytest.approx(134_217_728)


# ---------------------------------------------------------------------------------------------- the plan

WORKLOAD_OVERRIDES = ["trainer.train_batch_size=64", "algorithm.n=8", "sampling.max_new_tokens=1024"]


@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "qwen2.5-7b"])
def test_8xh100_plans_fit_and_their_overrides_compose(name):
    resolved = compose_config(WORKLOAD_OVERRIDES)
    keys = config_keys(resolved)
    shape, cluster = ModelShape.named(name), parse_cluster("8xH100")
    text, winner = plan_report(resolved, keys, cluster, shape, None, prompt_tokens=256, top=3)
    size = {"qwen2.5-0.5b": "494M", "qwen2.5-7b": "7.62B"}[name]
    assert text.splitlines()[0].startswith(f"cluster: 1x8xH100 (80 GB each); model: {size} parameters; step: 512 rows")
    assert text.splitlines()[1] == ("rates: roofline on H100 (train MFU 0.4, generation 0.3, data-parallel efficiency "
                                    "0.95: assumed)")
    assert [line[:3] for line in text.splitlines() if line[1:3] == ". "] == ["1. ", "2. ", "3. "]
    assert winner[:3] == ["launcher=ray", "+launcher.resource_pools.global=8", "launcher.gpus_per_worker=1"]
    composed = compose_config(kept_overrides(WORKLOAD_OVERRIDES, winner, "local") + winner)  # as rlloom train takes them
    sections = composed.sections
    placement = Placement(sections["launcher"].resource_pools["global"],
                          sequence_parallel=sections["train_engine"].sequence_parallel_size,
                          micro_batch_tokens=sections["train_engine"].max_tokens_per_micro_batch,
                          offload=sections["trainer"].offload_train_engines,
                          checkpointing=sections["train_engine"].gradient_checkpointing)
    workload = plan_workload(composed, shape, None, 256, gpu=True)
    memory = memory_per_device(placement, shape, workload)
    assert max(memory.values()) <= 0.9 * 80e9
    assert f"memory per device: colocated pool {memory['colocated pool'] / 1e9:.2f} GB" in text


def test_a_model_too_large_for_any_placement_says_what_would_fit(tmp_path):
    resolved = compose_config(WORKLOAD_OVERRIDES)
    keys = config_keys(resolved)
    with pytest.raises(ConfigError) as error:
        plan_report(resolved, keys, parse_cluster("1xH100"), ModelShape.named("qwen2.5-7b"), None, 256, 3)
    assert str(error.value).startswith("no placement of a 7.62B-parameter model fits 1xH100 (80 GB each): the "
                                       "leanest, colocated on 1;")
    assert "it would fit on 4 such devices (colocated on 4;" in str(error.value)  # 2: 61 + 15 + 15 GB of state
    config = tmp_path / "config.json"  # a 70B-class shape (Llama-3-70B's sizes)
    config.write_text('{"num_hidden_layers": 80, "hidden_size": 8192, "intermediate_size": 28672, '
                      '"num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 128256}')
    with pytest.raises(ConfigError) as error:
        plan_report(resolved, keys, parse_cluster("8xH100"), ModelShape.named(str(config)), None, 256, 3)
    assert str(error.value).endswith("its rollout's bf16 weights alone (141 GB) exceed one device: a rollout engine "
                                     "with tensor parallelism (rollout.tp_size, rollout=sglang) would split them")


LONG_ROWS = ["trainer.train_batch_size=1", "algorithm.n=2", "sampling.max_new_tokens=32512"]  # rows of 32,768


def small_gpu(gigabytes: float) -> Cluster:
    return Cluster(1, 1, DeviceSpec("G", 1e14, gigabytes * 1e9, 1e12, 1e11), 1e10)


def test_when_the_packing_mask_is_what_does_not_fit_the_plan_names_varlen_and_varlen_fits():
    shape = ModelShape.named("qwen2.5-0.5b")
    resolved = compose_config(LONG_ROWS)
    keys = config_keys(resolved)
    # The leanest placement (checkpointing, offload) holds 12.64 GB, of it the 32,768² · 2 = 2.15 GB mask of its
    # one-row micro-batch: over 90 % of 13 GB (11.7) with it, under without it.
    with pytest.raises(ConfigError) as error:
        plan_report(resolved, keys, small_gpu(13), shape, None, 256, 3)
    assert str(error.value).endswith("fits but for sdpa's packing mask (2.1 GB per device): "
                                     "train_engine.attention=varlen builds none")
    varlen = compose_config([*LONG_ROWS, "train_engine.attention=varlen"])
    _, winner = plan_report(varlen, keys, small_gpu(13), shape, None, 256, 3)
    # without the mask even the faster placement without offload fits (13.45 − 2.15 = 11.30 GB)
    assert "train_engine.gradient_checkpointing=true" in winner and "trainer.offload_train_engines=false" in winner
    # On 14.5 GB (13.05 usable) the leanest fits, naming the mask's share; without offload (13.45 GB) the mask
    # is what does not fit.
    text, _ = plan_report(resolved, keys, small_gpu(14.5), shape, None, 256, 3)
    assert ("memory per device: colocated pool 12.64 GB (87%), of it sdpa's packing mask 2.15 GB "
            "(train_engine.attention=varlen builds none)") in text
    assert ("  excluded 5x: colocated pool over its memory; sdpa's packing mask is what does not fit: "
            "train_engine.attention=varlen builds none") in text


def test_kept_overrides_drop_what_the_plan_sets():
    given = ["preset=tiny", "launcher=ray", "+launcher.resource_pools.global=2", "launcher.num_cpus=4",
             "resharder=broadcast", "train_engine.sequence_parallel_size=2", "train_engine.lr=1e-3"]
    plan = ["launcher=ray", "+launcher.resource_pools.global=1", "+launcher.resource_pools.gen=1",
            "+launcher.mapping.rollout=gen", "resharder=broadcast", "train_engine.sequence_parallel_size=1"]
    assert kept_overrides(given, plan, "ray") == ["preset=tiny", "launcher.num_cpus=4", "train_engine.lr=1e-3"]
    launcher = compose_config(kept_overrides(given, plan, "ray") + plan).sections["launcher"]
    assert (launcher.resource_pools, launcher.num_cpus) == ({"global": 1, "gen": 1}, 4)
    local = ["preset=tiny", "launcher.num_threads=1", "train_engine.lr=1e-3"]  # launcher=local's key
    assert kept_overrides(local, plan, "local") == ["preset=tiny", "train_engine.lr=1e-3"]
    assert split_cluster(["cluster=8xH100", "preset=tiny"]) == ("8xH100", ["preset=tiny"])


def test_the_command_reports_bad_input_in_one_line(tmp_path, capsys):
    path = tmp_path / "cluster.yaml"
    path.write_text("nodes: 1\ndevice: H100\nnetwork_bandwidth: 5.0e10\n")
    assert main(["plan", "--shape", "qwen2.5-0.5b", f"cluster={path}", "preset=tiny"]) == 2
    assert capsys.readouterr().err == (f"rlloom: error: cluster file {path}: missing field 'devices_per_node' "
                                       "(fields: nodes, devices_per_node, device, network_bandwidth)\n")
    assert main(["plan", "--shape", "qwen2.5-0.5b", "preset=tiny"]) == 2
    assert capsys.readouterr().err.startswith("rlloom: error: rlloom plan: name the target cluster: cluster=8xH100")
    assert main(["plan", "cluster=8xH100", "preset=tiny"]) == 2  # model=tiny has no config.json to read
    assert "give the model's shape: --shape" in capsys.readouterr().err
