"""With ulysses_sequence_parallel_size=2 over 4 workers, the log-prob/update calls dispatch by
data-parallel rank (ranks 0,1 -> chunk 0; ranks 2,3 -> chunk 1) and collect ranks 0 and 2 only."""

import torch
from verl import DataProto
from verl.single_controller.base.decorator import registered_methods, resolve_dispatch_mode
from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker


class _Group:
    """What the dispatch functions ask of a worker group, answered by in-process workers."""

    def __init__(self, workers):
        self.workers = workers
        self.world_size = len(workers)

    def _query_mesh_info(self, mesh):
        return [w._dispatch_dp_rank[mesh] for w in self.workers], [
            w._collect_dp_rank[mesh] for w in self.workers
        ]


def test_sp_ranks_get_the_same_rows(monkeypatch, make_cfg, tiny_model_dir):
    cfg = make_cfg(
        tiny_model_dir,
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
        "critic.ulysses_sequence_parallel_size=2",
        "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "critic.ppo_mini_batch_size=4",
    )
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1")
    actors, critics = [], []
    for rank in range(4):
        monkeypatch.setenv("RANK", str(rank))
        actors.append(ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor_rollout_ref"))
        critics.append(CriticWorker(cfg.critic))
    # 4 prompts x n=2 = 8 trajectories per mini-batch over 2 data-parallel ranks (not 4 workers)
    assert [w.ppo_mini_batch_size_per_rank for w in actors] == [4] * 4
    assert [w.ppo_mini_batch_size_per_rank for w in critics] == [4] * 4

    data = DataProto.from_dict(tensors={"x": torch.arange(8)[:, None]})
    for workers, methods in (
        (actors, ("compute_log_prob", "compute_ref_log_prob", "update_actor")),
        (critics, ("compute_values", "update_critic")),
    ):
        group = _Group(workers)
        for name in methods:
            mode = resolve_dispatch_mode(registered_methods(type(workers[0]))[name]["dispatch_mode"])
            (chunks,), _ = mode["dispatch_fn"](group, data)
            got = [c.batch["x"][:, 0].tolist() for c in chunks]
            assert got == [[0, 1, 2, 3], [0, 1, 2, 3], [4, 5, 6, 7], [4, 5, 6, 7]], name
            outputs = [
                DataProto.from_dict(tensors={"y": c.batch["x"] * 10 + r}) for r, c in enumerate(chunks)
            ]
            collected = mode["collect_fn"](group, outputs)
            assert collected.batch["y"][:, 0].tolist() == [0, 10, 20, 30, 42, 52, 62, 72], name
