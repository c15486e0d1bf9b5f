"""A table of malformed ``rlloom train`` invocations, each run in this process through the CLI: exit
status 2, one paragraph naming the key (or file), no traceback, and no model built (the model cache
stays empty: every mistake here is caught before any weights exist)."""

from __future__ import annotations

import os

import pytest
from rlloom.cli import main

# (overrides after preset=tiny, text the message must contain)
CASES = [
    # unknown names and keys
    (["algorithm=grpoo"], "grpoo"), (["rollout=vlm"], "vlm"), (["train_engine=fdsp"], "fdsp"),
    (["reward=arithmetik"], "arithmetik"), (["data=arithmetik"], "arithmetik"), (["launcher=rey"], "rey"),
    (["resharder=brodcast"], "brodcast"), (["model=tinyy"], "tinyy"), (["preset=tinyy"], "tinyy"),
    (["trainer.total_stepz=3"], "total_stepz"), (["sampling.temp=1"], "sampling.temp"),
    (["algorithm.nn=2"], "algorithm.nn"), (["train_engine.learning_rate=1"], "learning_rate"),
    (["rollout.max_batch_rowz=1"], "max_batch_rowz"), (["model.hidden=8"], "model.hidden"),
    (["trainer.trackers=[jsonl,nope]"], "nope"), (["+trainer.extra=1"], "extra"),
    # wrong types
    (["trainer.total_steps=abc"], "total_steps"), (["trainer.train_batch_size=1.5"], "train_batch_size"),
    (["sampling.temperature=hot"], "temperature"), (["algorithm.n=two"], "algorithm.n"),
    (["train_engine.lr=fast"], "lr"), (["trainer.save_final_model=maybe"], "save_final_model"),
    (["sampling.max_new_tokens=[1]"], "max_new_tokens"), (["trainer.seed=1e3"], "seed"),
    (["rollout.max_batch_rows=x"], "max_batch_rows"), (["model.num_layers=one"], "num_layers"),
    # out of range
    (["trainer.total_steps=0"], "trainer.total_steps"), (["trainer.train_batch_size=-2"], "train_batch_size"),
    (["trainer.val_n=0"], "trainer.val_n"), (["sampling.max_new_tokens=0"], "sampling.max_new_tokens"),
    (["sampling.temperature=-1"], "temperature"), (["sampling.top_p=0"], "top_p"), (["sampling.top_p=1.5"], "top_p"),
    (["algorithm.n=0"], "algorithm.n=0: must be >= 1"), (["trainer.seed=-1"], "trainer.seed"), (["trainer.seed=4294967296"], "trainer.seed"),
    (["train_engine.lr=-1"], "lr"), (["train_engine.weight_decay=-0.1"], "weight_decay"),
    (["train_engine.eps=0"], "eps"), (["train_engine.grad_clip=-1"], "grad_clip"),
    (["train_engine.micro_batch_size=0"], "micro_batch_size"), (["train_engine.min_lr_ratio=2"], "min_lr_ratio"),
    (["train_engine.betas=[0.9,1.5]"], "betas"), (["train_engine.lr_schedule=triangle"], "lr_schedule"),
    (["rollout.max_batch_rows=0"], "max_batch_rows"), (["trainer.device=tpu"], "trainer.device"),
    (["trainer.device=cuda:99"], "trainer.device=cuda:99"), (["train_engine.dtype=float8"], "dtype"),
    # NaN and infinities
    (["train_engine.lr=nan"], "lr"), (["train_engine.lr=inf"], "lr"), (["sampling.temperature=nan"], "temperature"),
    (["sampling.temperature=inf"], "temperature"), (["train_engine.eps=inf"], "eps"),
    (["train_engine.weight_decay=nan"], "weight_decay"), (["train_engine.grad_clip=nan"], "grad_clip"),
    # empty strings, unicode, paths
    (["algorithm="], "algorithm"), (["rollout=ñ"], "ñ"), (["trainer.run_dir=/dev/null/run"], "trainer.run_dir"),
    (["trainer.resume=/no/such/checkpoint"], "trainer.resume"),
    # missing and malformed files, impossible combinations
    (["data=files"], "data.train_files"),
    (["data=files", "data.train_files=[a.jsonl]", "data.val_fraction=0"], "data.val_files"),
    (["data=files", "data.train_files=[/no/such.jsonl]", "data.val_fraction=0.5"], "/no/such.jsonl"),
    (["algorithm=ppo", "algorithm.ppo_mini_batch_size=3"], "ppo_mini_batch_size"),
    (["rollout=server"], "rollout.urls"), (["rollout=server", "rollout.urls=[localhost:1]"], "rollout.urls"),
    # one client per run: a rollout pool of two would be two clients pushing weights to the same servers
    (["rollout=server", "rollout.urls=[http://h:1]", "launcher=ray", "+launcher.resource_pools.gen=2",
      "+launcher.mapping.rollout=gen"], "launcher.resource_pools.gen=2 processes; give it one: "
                                        "launcher.resource_pools.gen=1"),
    (["rollout=server", "rollout.urls=[http://h:1]", "launcher=ray", "+launcher.resource_pools.global=2"],
     "+launcher.resource_pools.client=1 +launcher.mapping.rollout=client"),
    (["rollout=sglang", "rollout.url=http://h:1", "launcher=ray", "+launcher.resource_pools.global=2"],
     "rollout=sglang with rollout.url runs one client, but the rollout's pool 'global' has"),
    (["rollout=sglang", "rollout.url=http://h:1", "rollout.offline=true"], "rollout.offline"),
    # issue 38: tracebacks and late refusals until then
    (["=5"], "the override '=5' names no key"), (["trainer.run_dir=/proc/x"], "trainer.run_dir"),
    # head size 62 / 2 = 31: odd (preset=tiny has 2 heads; 60 / 4 = 15, the reported case: test_plugin_shape.py)
    (["model.hidden_size=62"], "model.hidden_size=62"), (["trainer.val_temperature=-1"], "trainer.val_temperature"),
    (["sampling.top_k=-7"], "sampling.top_k=-7: must be -1 (off) or >= 1"), (["sampling.top_k=0"], "sampling.top_k=0"),
    (["trainer.test_freq=-3"], "trainer.test_freq=-3"),
    (["data=files", "data.train_files=[/dev/null]", "data.val_fraction=0.5"],
     "data.train_files: '/dev/null' is not a regular"),
    # a mapping's new key without its '+': the advice says how (followed below)
    (["data=reasoning_gym", "data.task_config={min_terms: 2}"],
     "data.task_config is a mapping; a key it does not hold yet takes a '+': +data.task_config.min_terms=<value>"),
]


def test_the_advice_for_a_mappings_new_key_works_when_followed():
    from rlloom.config import compose_config

    resolved = compose_config(["preset=tiny", "data=reasoning_gym", "+data.task_config.min_terms=2"])
    assert resolved.sections["data"].task_config == {"min_terms": 2}


@pytest.mark.parametrize("client", [["rollout=server", "rollout.urls=[http://h:1]"],
                                    ["rollout=sglang", "rollout.url=http://h:1"]], ids=["server", "sglang"])
def test_the_advice_for_a_server_client_in_a_pool_of_many_works_when_followed(client):
    from rlloom.config import compose_config

    resolved = compose_config(["preset=tiny", *client, "launcher=ray", "+launcher.resource_pools.global=2",
                               "+launcher.resource_pools.client=1", "+launcher.mapping.rollout=client"])
    assert resolved.sections["launcher"].pool_of("rollout") == "client"


def test_sglang_servers_the_run_launches_may_fill_a_pool_of_many():
    from rlloom.config import compose_config

    # each process launches a server of its own: two clients, two servers
    resolved = compose_config(["preset=tiny", "rollout=sglang", "launcher=ray", "+launcher.resource_pools.gen=2",
                               "+launcher.mapping.rollout=gen"])
    assert resolved.sections["launcher"].pools()["gen"] == 2 and resolved.sections["rollout"].url is None


def test_the_table_is_large_enough():
    assert len(CASES) >= 60


@pytest.mark.parametrize("overrides, named", CASES, ids=[" ".join(case[0]) for case in CASES])
def test_a_malformed_invocation_is_one_paragraph_and_exit_2(overrides, named, tmp_path, capsys):
    cache = tmp_path / "models"
    cache.mkdir()
    status = main(["train", "preset=tiny", f"model.cache_dir={cache}", f"trainer.run_dir={tmp_path / 'run'}", *overrides]
                  if not any(o.startswith("trainer.run_dir=") for o in overrides) else
                  ["train", "preset=tiny", f"model.cache_dir={cache}", *overrides])
    err = capsys.readouterr().err
    assert status == 2, err
    assert named in err and "Traceback" not in err
    assert err.startswith("rlloom: error: ") and err.count("\n") == 1, err
    assert os.listdir(cache) == [], "a model was built before the error"


def test_max_new_tokens_beyond_the_models_context_is_refused_from_its_config(tmp_path, capsys):
    """Checked against ``max_position_embeddings`` of the model folder's config.json (the tiny model's: 256) once
    the folder exists, before any engine starts (it ended in a 64 GB allocation)."""
    status = main(["train", "preset=tiny", f"model.cache_dir={tmp_path / 'models'}",
                   f"trainer.run_dir={tmp_path / 'run'}", "sampling.max_new_tokens=256"])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("rlloom: error: sampling.max_new_tokens=256: the model's context is 256 tokens"), err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert not (tmp_path / "run" / "checkpoints").exists()
