"""``rlloom eval``, ``generate``, ``chat`` and ``export`` on a real tiny run's checkpoints and model folders."""

from __future__ import annotations

import dataclasses
import io
import json
import os

import pytest
import torch
from rlloom.cli import main
from rlloom_trainer import testing

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> str:
    """A tiny run with validation and a checkpoint at steps 2 and 4."""
    path = tmp_path_factory.mktemp("run") / "tiny"
    testing.train_tiny(path, "trainer.total_steps=4", "trainer.test_freq=2", "trainer.save_freq=2",
                       cache_dir=tmp_path_factory.mktemp("cache"))
    return str(path)


def validation_of(run_dir: str, step: int) -> dict[str, float]:
    (row,) = [row for row in testing.metric_rows(run_dir)
              if row["step"] == step and "val-core/digits/acc/mean@2" in row]
    return {key: value for key, value in row.items() if key.startswith("val-")}


def test_eval_of_a_checkpoint_equals_the_validation_of_its_step(run_dir, tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert main(["eval", os.path.join(run_dir, "checkpoints", "global_step_2"), "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["step"] == 2
    metrics = {key: value for key, value in record["metrics"].items() if key.startswith("val-")}
    assert metrics == validation_of(run_dir, 2)
    assert validation_of(run_dir, 2) != validation_of(run_dir, 4)  # so the step's weights and seeds matter
    assert "val-core/digits/acc/mean@2 = " in capsys.readouterr().out


def test_eval_of_a_run_folder_takes_its_latest_checkpoint_and_overrides(run_dir):
    assert main(["eval", run_dir]) == 0
    record = json.loads(open(os.path.join(run_dir, "eval", "global_step_4.json")).read())
    assert {k: v for k, v in record["metrics"].items() if k.startswith("val-")} == validation_of(run_dir, 4)
    assert main(["eval", run_dir, "trainer.val_n=3", "trainer.val_greedy=true"]) == 0
    metrics = json.loads(open(os.path.join(run_dir, "eval", "global_step_4.json")).read())["metrics"]
    assert {"val-core/digits/acc/mean@3", "val-aux/digits/acc/best@3", "val-core/digits/acc/greedy"} <= set(metrics)


def test_eval_refuses_what_is_not_a_model(run_dir, tmp_path, capsys):
    assert main(["eval", str(tmp_path)]) == 2
    assert "is not a run folder, a checkpoint" in capsys.readouterr().err
    assert main(["eval", run_dir, "trainer.val_nn=3"]) == 2


@pytest.mark.parametrize("command", ["eval", "export"])
def test_a_run_folder_without_a_checkpoint_yet_is_named_so(command, tmp_path, capsys):
    young = tmp_path / "young-run"  # stopped before its first checkpoint: a config and metrics only
    young.mkdir()
    (young / "config.yaml").write_text("trainer: {}\n")
    (young / "metrics.jsonl").write_text("")
    args = [command, str(young)] + (["--out", str(tmp_path / "out")] if command == "export" else [])
    assert main(args) == 2
    assert "is a run folder without a complete checkpoint" in capsys.readouterr().err


def test_generate_samples_what_the_rollout_engine_samples(run_dir, tmp_path, monkeypatch):
    from rlloom.config import compose_config
    from rlloom.data import PromptRecord
    from rlloom_trainer.prompts import PromptEncoder
    from rlloom.plugins.registry import get_registry
    from rlloom.types import EngineSpec
    from rlloom_trainer.trainer import sampling_params
    from transformers import AutoTokenizer

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("What is 2+3?\nName a digit.\n")
    out = tmp_path / "out.jsonl"
    assert main(["generate", os.path.join(run_dir, "checkpoints", "latest"), "sampling.max_new_tokens=5",
                 "trainer.seed=7", "--prompts", str(prompts), "-n", "2", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(row["index"], row["sample"]) for row in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]

    model = os.path.join(run_dir, "final_model")  # the weights of the last checkpoint
    resolved = compose_config(["preset=tiny", "model=hf", f"model.path={model}", "sampling.max_new_tokens=5"])
    engine = get_registry().build("rollout", resolved.choices["rollout"], resolved.sections["rollout"],
                                  EngineSpec(model, "rollout", 7))
    tokenizer = AutoTokenizer.from_pretrained(model)
    texts = ("What is 2+3?", "Name a digit.")
    records = [PromptRecord([{"role": "user", "content": text}], None, "x") for text in texts]
    sampling = dataclasses.replace(sampling_params(resolved.sections["sampling"]), n=2, seed=7)
    batch = engine.generate(PromptEncoder(tokenizer, 256).encode(records), sampling)
    for i, row in enumerate(rows):
        mask = batch["response_mask"][i].bool()
        assert row["token_ids"] == batch["responses"][i][mask].tolist()
        assert row["log_probs"] == batch["rollout_log_probs"][i][mask].tolist()
        assert row["response"] == tokenizer.decode(row["token_ids"], skip_special_tokens=True)
        assert row["prompt"] == tokenizer.apply_chat_template(records[i // 2].prompt, tokenize=False,
                                                              add_generation_prompt=True)
    assert len({tuple(row["token_ids"]) for row in rows}) > 1


def test_chat_answers_piped_lines(run_dir, tmp_path, monkeypatch, capsys):
    model = os.path.join(run_dir, "final_model")
    greedy = ["sampling.temperature=0", "sampling.max_new_tokens=4"]
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello\n")
    out = tmp_path / "out.jsonl"
    assert main(["generate", model, *greedy, "--prompts", str(prompts), "--out", str(out)]) == 0
    first = json.loads(out.read_text())["response"]
    capsys.readouterr()
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\nand then?\n/reset\nhello\n"))
    assert main(["chat", model, *greedy]) == 0
    answers = capsys.readouterr().out
    assert answers.startswith(first + "\n") and answers.endswith("\n" + first + "\n")  # /reset forgot the talk
    assert len(answers) > 2 * len(first + "\n")  # a second answer in between


def test_export_of_a_run_folder_loads_in_transformers(run_dir, capsys):
    from transformers import AutoModelForCausalLM

    assert main(["export", run_dir]) == 0
    out = os.path.join(run_dir, "export")
    assert capsys.readouterr().out.strip() == out
    exported = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    trained = AutoModelForCausalLM.from_pretrained(os.path.join(run_dir, "final_model"), dtype=torch.float32)
    for (name, ours), (_, theirs) in zip(exported.state_dict().items(), trained.state_dict().items()):
        assert torch.equal(ours, theirs), name
    assert main(["export", os.path.join(run_dir, "checkpoints", "latest"), "--out", out]) == 0
    assert main(["export", os.path.join(run_dir, "final_model")]) == 2
