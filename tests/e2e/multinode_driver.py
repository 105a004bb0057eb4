"""Driver for test_multinode_cluster.py (and a template for real clusters): connect to a running Ray
cluster (``RAY_ADDRESS``), check it has ``--nnodes`` alive nodes, train GRPO with ``trainer.nnodes`` x
``trainer.n_gpus_per_node`` workers through main_ppo's pieces, and print one JSON line with the node each
worker ran on and the per-step metrics.

    RAY_ADDRESS=HEAD_IP:6379 python tests/e2e/multinode_driver.py --model DIR --workdir OUT --nnodes 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--nnodes", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2)
    args = ap.parse_args(argv)

    import ray
    from verl.trainer.config import load_config, validate_config
    from verl.trainer.main_ppo import build_trainer, ray_init_kwargs
    from verl.utils.dataset import write_parquet
    from verl.utils.dataset.tasks import make_arithmetic_rows

    train = write_parquet(
        make_arithmetic_rows(8, seed=0, digits=1, split="train"), f"{args.workdir}/train.parquet"
    )
    cfg = load_config(
        [
            f"data.train_files={train}",
            "data.train_batch_size=2",
            "data.max_prompt_length=32",
            "data.max_response_length=4",
            f"actor_rollout_ref.model.path={args.model}",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false",
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.actor.use_kl_loss=true",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.optim.lr=0.001",
            "trainer.device=cpu",
            f"trainer.nnodes={args.nnodes}",
            "trainer.n_gpus_per_node=1",
            f"trainer.total_training_steps={args.steps}",
            "trainer.logger=[console]",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
            "trainer.progress_bar=false",
            f"trainer.default_local_dir={args.workdir}/out",
        ]
    )
    validate_config(cfg)
    kwargs = ray_init_kwargs(cfg)
    kwargs.pop("include_dashboard", None)  # connecting: the cluster's own setting holds
    ray.init(address=os.environ["RAY_ADDRESS"], **kwargs)
    deadline = time.monotonic() + 120
    while len([n for n in ray.nodes() if n["Alive"]]) < args.nnodes:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the cluster has {len(ray.nodes())} nodes, expected {args.nnodes}")
        time.sleep(1)
    trainer = build_trainer(cfg)
    trainer.init_workers()
    try:
        wg = trainer.actor_rollout_wg
        nodes = ray.get(
            [w.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()) for w in wg.workers]
        )
        metrics = trainer.fit()
    finally:
        trainer.shutdown()
    node_resources = {
        n["NodeID"]: sorted(k for k in n["Resources"] if k.startswith("verl_test_")) for n in ray.nodes()
    }
    print(
        "RESULT "
        + json.dumps(
            {
                "worker_nodes": nodes,
                "node_resources": node_resources,
                "metrics": {k: v for k, v in metrics.items() if isinstance(v, int | float)},
            }
        ),
        flush=True,
    )
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
