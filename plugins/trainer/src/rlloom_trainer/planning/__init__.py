"""What ``rlloom plan`` (issue 37, being built) reasons with: the target cluster's hardware
(:mod:`.hardware`) and the memory a placement needs on each device (:mod:`.memory`)."""
