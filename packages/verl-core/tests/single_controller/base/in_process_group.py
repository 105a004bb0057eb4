"""A worker group whose ``world_size`` workers are plain objects in the test's process (no Ray): each call
goes through the real ``@register`` dispatch and collect functions, then to every rank's object in turn."""

from verl.single_controller.base import ResourcePool, WorkerGroup


class InProcessGroup(WorkerGroup):
    """Ranks ``0 .. world_size - 1`` of ``cls``, each an object here; a per-rank argument list (one entry a
    rank, as a dispatch function makes it) gives each rank its own entry, any other value goes to all."""

    def __init__(self, cls, world_size: int):
        super().__init__(ResourcePool([world_size]))
        self._workers = []
        for rank in range(world_size):
            worker = cls()
            worker._rank, worker._world_size = rank, world_size
            self._workers.append(worker)
        self._bind_worker_method(cls)

    def _execute(self, method_name, args, kwargs, rank_zero, blocking):
        n = len(self._workers)
        ranks = [0] if rank_zero else range(n)

        def pick(v, r):
            return v[r] if isinstance(v, (list, tuple)) and len(v) == n else v

        return [
            getattr(self._workers[r], method_name)(
                *(pick(a, r) for a in args), **{k: pick(v, r) for k, v in kwargs.items()}
            )
            for r in ranks
        ]
