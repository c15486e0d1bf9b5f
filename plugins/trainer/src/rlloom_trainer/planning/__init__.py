"""What ``rlloom plan`` (:mod:`rlloom_trainer.commands.plan`) reasons with: the target cluster's hardware
(:mod:`.hardware`), the memory a placement needs on each device (:mod:`.memory`), a measured profile of the
config (:mod:`.profile`) or a roofline (:mod:`.rates`), the step time of a placement (:mod:`.steptime`), the
search over placements (:mod:`.search`) and what the command prints (:mod:`.explain`)."""
