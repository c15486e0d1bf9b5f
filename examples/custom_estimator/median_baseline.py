"""A custom advantage estimator in one page: GRPO's group baseline taken as the median instead of the mean.

    A_i = r_i − median{r_j : j in the group of i}      (the lower median for an even group, as torch.median)

broadcast over the response's tokens, 0 on padding. Against the mean, one lucky sample in a group of failures
moves nobody else's advantage. Registered as ``algorithm.adv_estimator=median_baseline`` for every algorithm
of the GRPO family; the entry point (pyproject.toml) is this module, which imports no torch until the
estimator runs (every ``rlloom`` command loads every plugin's entry point).
"""

from __future__ import annotations

from rlloom import hookimpl


def median_baseline(*, scores, group_ids, response_mask, **_):
    """The estimator, in the one signature every estimator has (rlloom.protocols.AdvantageEstimator)."""
    import torch

    if scores is None or group_ids is None:
        raise ValueError("adv_estimator=median_baseline needs sequence scores and group ids")
    medians = {group: torch.median(scores[[i for i, g in enumerate(group_ids) if g == group]])
               for group in set(group_ids)}
    baseline = torch.stack([medians[group] for group in group_ids])
    return (scores - baseline)[:, None] * response_mask.to(scores.dtype)


@hookimpl
def register_advantage_estimators(register):
    register("median_baseline", median_baseline)
