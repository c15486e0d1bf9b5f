"""What a dataset plugin owes rlloom: :class:`DatasetContract`."""

from __future__ import annotations

from typing import ClassVar

from rlloom_trainer.contracts.plugin import PluginContract


class DatasetContract(PluginContract):
    """``data=<name>`` gives non-empty train and validation prompts (:class:`rlloom.data.PromptRecord`, a
    prompt, a data source), no prompt in both, and the same lists for the same seed."""

    kind: ClassVar[str] = "data"
    seed: ClassVar[int] = 1

    def build(self, registry):
        return registry.get("data", self.name).factory(self.component_config(registry), self.seed)

    def test_train_and_validation_prompts_are_there_and_disjoint(self, registry):
        from rlloom.data import PromptRecord

        dataset = self.build(registry)
        assert dataset.train and dataset.val, (len(dataset.train), len(dataset.val))
        for record in [*dataset.train, *dataset.val]:
            assert isinstance(record, PromptRecord) and record.prompt and record.data_source, record
        both = {repr(r.prompt) for r in dataset.train} & {repr(r.prompt) for r in dataset.val}
        assert not both, f"{len(both)} prompts in both train and validation, e.g. {sorted(both)[:3]}"

    def test_the_same_seed_gives_the_same_prompts(self, registry):
        first, second = self.build(registry), self.build(registry)
        assert (first.train, first.val) == (second.train, second.val)
