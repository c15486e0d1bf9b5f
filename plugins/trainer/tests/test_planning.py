"""``rlloom plan``'s hardware descriptions and memory model (rlloom_trainer.planning) against hand values."""

from __future__ import annotations

import pytest

from rlloom_trainer.planning.hardware import parse_cluster
from rlloom_trainer.planning.memory import ModelShape, rollout_bytes_per_device, train_bytes_per_device

QWEN25_05B = {  # Qwen/Qwen2.5-0.5B-Instruct's config.json (the sizes)
    "num_hidden_layers": 24, "hidden_size": 896, "intermediate_size": 4864, "num_attention_heads": 14,
    "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
}


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
    shape = ModelShape.from_config(QWEN25_05B)
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
