"""Routed dispatch through the weighted router (docs/design.md §2, "Weighted routing"): each
arrival goes to the replica with the best weighted score of what the router sees of them."""

from __future__ import annotations

from collections.abc import Sequence

import simpy

from batchsim.sim.dispatch import OnRejected, RoutedDispatch, Submittable
from batchsim.sim.request import Request
from batchsim.sim.routers import round_robin
from batchsim.sim.scorers import ArrivalShape
from batchsim.sim.signal_view import SignalView
from batchsim.sim.weighted_router import WeightedRouter


class ScoredDispatch(RoutedDispatch):
    def __init__(self, env: simpy.Environment, replicas: Sequence[Submittable],
                 router: WeightedRouter, on_rejected: OnRejected) -> None:
        # The base class's router serves only the lone-replica shortcut, which never calls it.
        super().__init__(replicas, round_robin, on_rejected)
        self.weighted = router
        self.view = SignalView(env, replicas, router)

    def arrive(self, request: Request) -> None:
        if len(self.replicas) <= 1:  # held while none serves, or nothing to choose
            if self.replicas:
                self.view.track(0, request)
            super().arrive(request)
            return
        signals = self.view.signals(request)
        block_size = self.replicas[0].policy.pool.block_size
        index = self.weighted.choose(signals, ArrivalShape(request.prompt_tokens, block_size),
                                     request.request_id)
        self.view.assigned(index, request, signals[index].prefix_blocks_anywhere)
        if not self.replicas[index].submit(request):
            self.on_rejected(request)
