"""What the memory line's GPU count means when an arm runs on more GPUs than one replica.

The memory line ("on 4x h100-sxm") is one replica's plan; an arm of several replicas, or a
disaggregated arm's two pools, runs on more. The console caption and the report say so, with
each arm's own count, rather than let the replica's count pass for the arm's.
"""

from __future__ import annotations

from collections.abc import Sequence


def gpus_per_arm_note(per_replica: int, arm_gpus: Sequence[tuple[str, object]]) -> str | None:
    """One sentence naming each arm's GPUs; None when every arm runs on one replica's."""
    counts = [(name, gpus) for name, gpus in arm_gpus if isinstance(gpus, int)]
    if all(gpus == per_replica for _, gpus in counts):
        return None
    replica = f"The memory plan is one replica's ({per_replica} GPU{'s' * (per_replica > 1)})"
    if len({gpus for _, gpus in counts}) == 1:
        return f"{replica}; each arm runs on {counts[0][1]:,} GPUs."
    each = ", ".join(f"{name} {gpus:,}" for name, gpus in counts)
    return f"{replica}; GPUs per arm: {each}."
