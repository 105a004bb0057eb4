"""``FullyAsyncRayTrainer``: core's trainer with the rollout on a pool of its own, running concurrently.

Why a loop of its own. Core's ``fit`` is one sequence per step (generate, score, train) on one pool.
Here two loops run at once: the rollouter (``rollouter.Rollouter``, a driver thread) generates and
scores on the rollout pool, and this trainer's ``fit`` consumes finished samples on the trainer pool;
they meet only at the bounded queue and at weight syncs (``message_queue.Coordinator``). Upstream
likewise ships separate trainer classes for this (``FullyAsyncTrainer``, ``OneStepOffRayTrainer``).
The loop is built from core's pieces: core's ``reward`` stage scores on the rollouter, and a trainer step
is core's pipeline from ``balance`` on (``balance -> old_log_prob -> ref -> values -> adv ->
update_critic -> update_actor``, then this class's ``sync_weights`` and core's ``testing`` and
``save_checkpoint``), with core's validation, tracking, metrics and checkpoint files (``trainer_state`` /
``load_checkpoint`` add the rollouter's state).

One trainer step consumes ``data.train_batch_size`` samples (= ``require_batches`` mini-batches); every
``trigger_parameter_sync_step`` steps (and after the last) the weights go to the rollout pool as the
next version. One-step-off is the setting ``trigger_parameter_sync_step=1``, ``staleness_threshold=1``,
``partial_rollout=false``, ``data.gen_batch_size=data.train_batch_size`` (configs/one_step_off_cpu.yaml):
the rollout pool generates batch k+1 with the weights of step k-1 while the trainer trains on batch k.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from typing import Any

import numpy as np
import ray
from verl.protocol import DataProto
from verl.single_controller.ray import RayClassWithInitArgs
from verl.trainer.ppo.metric_utils import (
    compute_data_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
    marked_timer,
)
from verl.trainer.ppo.pipeline import Pipeline, Stage
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, Role
from verl.utils.checkpoint import get_rng_state, load_trainer_state

from verl_recipe_fully_async.config import (
    samples_per_version,
    total_training_steps,
    trainer_pool_actor_config,
)
from verl_recipe_fully_async.message_queue import Coordinator, Sample, SyncRequest, concat_samples
from verl_recipe_fully_async.rollouter import Rollouter, wait_refs
from verl_recipe_fully_async.streaming import StreamingRollouter

SUMMARY_FILE = "async_summary.json"


class FullyAsyncRayTrainer(RayPPOTrainer):
    """See the module doc. ``role_worker_mapping`` needs ``Role.Rollout`` (the rollout pool's worker)
    besides core's roles; the resource pool manager maps it to a pool of its own."""

    separate_rollout_pool = True

    def create_dataloader(self, *args: Any) -> None:
        super().create_dataloader(*args)
        steps = total_training_steps(self.config)
        if steps is not None:  # rollout.total_rollout_steps decides when set
            self.total_training_steps = steps

    # ------------------------------------------------------------------ workers
    def spawn_worker_groups(self, roles: dict) -> dict[str, Any]:
        """Core's trainer-side groups, then the rollout pool's group, whose ``init_model`` starts at once
        so the two pools load their models concurrently."""
        cfg = self.config
        actor_cfg = trainer_pool_actor_config(cfg)  # the trainer pool validates with the native engine
        roles = {
            r: {**kw, "config": actor_cfg} if kw.get("config") is cfg.actor_rollout_ref else kw
            for r, kw in roles.items()
        }
        all_wg = super().spawn_worker_groups(roles)
        cls = RayClassWithInitArgs(
            cls=self.role_worker_mapping[Role.Rollout],
            config=cfg.actor_rollout_ref,
            role="rollout",
            device=self.device_name,
            seed=int(cfg.trainer.seed),
        )
        self.rollout_wg = self.ray_worker_group_cls(
            resource_pool=self.resource_pool_manager.get_resource_pool(Role.Rollout),
            ray_cls_with_init=cls,
            name_prefix=f"rollout{uuid.uuid4().hex[:6]}_",
        )
        self._rollout_init = self.rollout_wg.execute_all_async("init_model")
        return all_wg

    def init_workers(self) -> None:
        """Both pools' workers, then the cross-pool weight transfer."""
        super().init_workers()
        ray.get(self._rollout_init)
        cfg = self.config
        self.streaming = self.rollout_wg.can_stream()
        # the native rollout copies the trainer module's own names; vLLM loads HF names
        self._hf_names = cfg.actor_rollout_ref.rollout.name == "vllm"
        if cfg.async_training.partial_rollout and not (self.streaming or self.rollout_wg.can_pause()):
            raise RuntimeError(
                "async_training.partial_rollout=true but the rollout engine cannot pause this model "
                "(the native loop does not support its architecture); set partial_rollout=false"
            )
        if cfg.async_training.weight_sync == "collective":
            size = 1 + self.rollout_wg.world_size
            host, port = self.actor_rollout_wg.host_sync_group(size)
            ray.get(
                self.actor_rollout_wg.join_sync_group(host, port, 0, size)
                + self.rollout_wg.join_sync_group(host, port, 1, size)
            )

    # ------------------------------------------------------------------ weights
    def _transfer_weights(self) -> None:
        """Push the trainer's weights to the idle rollout pool (before the loops start)."""
        if self.config.async_training.weight_sync == "collective":
            ray.get(self.actor_rollout_wg.send_weights(self._hf_names) + self.rollout_wg.receive_weights())
        else:
            self.rollout_wg.load_weights(self.actor_rollout_wg.put_weights(self._hf_names)[0])

    def _publish_weights(self, snapshot: bool) -> dict | None:
        """Give the rollouter the next version; returns its state when ``snapshot`` (for a checkpoint)."""
        version = self.coord.trainer_version + 1
        t0 = time.perf_counter()
        if self.config.async_training.weight_sync == "collective":
            request = SyncRequest(version, snapshot=snapshot)
            self.coord.post_sync(request)
            # returns once the rollout pool received them
            wait_refs(self.coord, self.actor_rollout_wg.send_weights(self._hf_names))
            # the trainer waited for the rollouter's safe point until it took the request
            self._sync_wait_s += max(0.0, request.started - t0)
        else:
            payload = self.actor_rollout_wg.put_weights(self._hf_names)[0]
            request = SyncRequest(version, payload=payload, snapshot=snapshot)
            t_post = time.perf_counter()
            self.coord.post_sync(request)  # waits only if the previous version is not loaded yet
            self._sync_wait_s += time.perf_counter() - t_post
        state = self.coord.wait_synced(request) if snapshot else None
        self._sync_s += time.perf_counter() - t0
        return state

    # ------------------------------------------------------------------ the loop
    def fit(self) -> dict[str, float]:
        cfg = self.config
        self.global_steps = 0
        self.check_steps_remaining()
        total = self.total_training_steps
        tbs = int(cfg.data.train_batch_size)
        self.coord = Coordinator(
            samples_per_version(cfg), float(cfg.async_training.staleness_threshold), total_samples=total * tbs
        )
        rollouter_cls = StreamingRollouter if self.streaming else Rollouter
        self.rollouter = rollouter_cls(self, self.coord, self.rollout_wg)
        self._sync_s = self._sync_wait_s = 0.0
        self._async_state: dict | None = None
        self.load_checkpoint()
        self.logger = self.make_logger()
        self._transfer_weights()
        thread = threading.Thread(target=self.rollouter.run, name="rollouter", daemon=True)
        last: dict[str, float] = {}
        val_metrics: dict[str, float] = {}
        try:
            if self.val_reward_fn is not None and cfg.trainer.val_before_train:
                val_metrics = self.validate()
                self.logger.log(val_metrics, step=self.global_steps)
                if cfg.trainer.val_only:
                    return val_metrics
            self._t0 = time.perf_counter()
            self._first_step = self.global_steps + 1
            thread.start()
            for step in range(self.global_steps + 1, total + 1):
                self.global_steps = step
                last = self._async_step()
                val_metrics = {k: v for k, v in last.items() if k.startswith("val")} or val_metrics
                self.logger.log(last, step=step)
        finally:
            self.coord.stop()
            if thread.is_alive():
                thread.join()
            self.logger.finish()
        if self.coord.error is not None:  # the rollouter failed after producing the last samples
            raise RuntimeError("the rollouter failed") from self.coord.error
        self._write_summary(last, val_metrics)
        return last

    def build_pipeline(self) -> Pipeline:
        """Core's pipeline from ``balance`` on (the rollouter generates and scores), with the weight sync
        to the rollout pool before validation and the checkpoint."""
        pipeline = super().build_pipeline().starting_at("balance")
        return pipeline.insert_before("testing", Stage("sync_weights", self.stage_sync_weights, when=self.is_sync_step))

    def is_sync_step(self) -> bool:
        """Every ``trigger_parameter_sync_step`` steps and after the last one."""
        freq = int(self.config.async_training.trigger_parameter_sync_step)
        return self.global_steps >= self.total_training_steps or self.global_steps % freq == 0

    def stage_sync_weights(self, batch: DataProto, metrics: dict) -> DataProto:
        """The next weight version to the rollout pool (with the rollouter's state when this step saves)."""
        self._async_state = self._publish_weights(snapshot=self.is_save_step())
        return batch

    def _async_step(self) -> dict[str, float]:
        cfg = self.config
        metrics: dict[str, float] = {}
        timing: dict[str, float] = {}
        with marked_timer("step", timing):
            with marked_timer("wait_samples", timing):
                samples = self.coord.get(int(cfg.data.train_batch_size))
            version = self.coord.trainer_version
            batch = concat_samples([s.data for s in samples], self.rollouter_pad_id)
            metrics.update(self._sample_metrics(samples, version))
            batch = self.train_step(batch, metrics, timing)
        metrics["training/global_step"] = self.global_steps
        metrics["training/epoch"] = self.epoch
        metrics.update(compute_data_metrics(batch, use_critic=self.use_critic))
        metrics.update(compute_timing_metrics(batch, timing))
        metrics.update(compute_throughout_metrics(batch, timing, self.n_workers))
        metrics.update(self._pool_metrics())
        return metrics

    @property
    def rollouter_pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id if self.tokenizer is not None else None
        return int(pad) if pad is not None else 0

    def _sample_metrics(self, samples: list[Sample], version: int) -> dict[str, float]:
        """Staleness and partial rollouts of this step's samples (upstream's names where it has them)."""
        q = self.coord.queue
        age = np.array([version - s.version for s in samples])
        span = np.array([s.end_version - s.version for s in samples])
        return {
            "fully_async/param_version": float(version),
            "fully_async/stale_samples": float((age > 0).sum()),
            "fully_async/staleness/max": float(age.max()),
            "fully_async/staleness/mean": float(age.mean()),
            "fully_async/count/stale_samples_processed": float(q.stale_got),
            "fully_async/count/stale_trajectory_processed": float(q.stale_trajectories_got),
            "fully_async/partial/total_partial_num": float((span > 0).sum()),
            "fully_async/partial/partial_ratio": float((span > 0).mean()),
            "fully_async/partial/max_partial_span": float(span.max()),
            "fully_async/queue_size": float(len(q)),
            "fully_async/dropped_partial_samples": float(self.rollouter.dropped_partial_samples),
        }

    def _pool_metrics(self) -> dict[str, float]:
        """Idle time per pool since the loops started: the trainer pool waits for samples and for the
        rollouter's safe point; the rollout pool is idle whenever no call runs on it."""
        wall = max(time.perf_counter() - self._t0, 1e-9)
        trainer_idle = self.coord.idle["trainer"] + self._sync_wait_s
        return {
            "fully_async/wall_s": wall,
            "fully_async/trainer_idle_s": trainer_idle,
            "fully_async/rollout_busy_s": self.rollouter.busy_s,
            "fully_async/sync_s": self._sync_s,
            "trainer/idle_ratio": trainer_idle / wall,
            "rollouter/idle_ratio": max(0.0, 1.0 - self.rollouter.busy_s / wall),
        }

    def _write_summary(self, last: dict[str, float], val_metrics: dict[str, float]) -> None:
        """``{default_local_dir}/async_summary.json``: wall time, throughput, idle time per pool, validation."""
        if not last:
            return
        steps = self.global_steps - self._first_step + 1
        samples = steps * int(self.config.data.train_batch_size)
        wall = last["fully_async/wall_s"]
        summary = {
            "steps": steps,
            "samples": samples,
            "trajectories": samples * int(self.config.actor_rollout_ref.rollout.n),
            "wall_s": wall,
            "samples_per_s": samples / wall,
            "trainer_idle_s": last["fully_async/trainer_idle_s"],
            "rollout_idle_s": wall - last["fully_async/rollout_busy_s"],
            "trainer_idle_ratio": last["trainer/idle_ratio"],
            "rollout_idle_ratio": last["rollouter/idle_ratio"],
            "sync_s": last["fully_async/sync_s"],
            "stale_samples": last["fully_async/count/stale_samples_processed"],
            "dropped_partial_samples": last["fully_async/dropped_partial_samples"],
            "validation": val_metrics,
        }
        os.makedirs(self.output_dir, exist_ok=True)
        with open(os.path.join(self.output_dir, SUMMARY_FILE), "w") as f:
            json.dump(summary, f, indent=2)

    # ------------------------------------------------------------------ checkpoints
    def trainer_state(self) -> dict[str, Any]:
        """Core's keys, with the data position the rollouter reported at this step's sync (it draws the
        prompts), plus the rollouter's queue, counters and prompts still to generate."""
        snap = self._async_state
        if snap is None:
            raise RuntimeError("a checkpoint needs the rollouter's state from this step's weight sync")
        return {
            "global_step": self.global_steps,
            "epoch": snap["epoch"],
            "batches_consumed": snap["batches_consumed"],
            "dataloader": snap["dataloader"],
            "rng": get_rng_state(),
            "kl_ctrl": self.kl_ctrl_in_reward.state_dict() if self.kl_ctrl_in_reward is not None else None,
            "total_training_steps": self.total_training_steps,
            "fully_async": {
                k: snap[k] for k in ("coordinator", "prompts_to_generate", "dropped_partial_samples")
            },
        }

    def load_checkpoint(self) -> int:
        step = super().load_checkpoint()
        if self._resumed_from is not None:
            self.rollouter.load_state_dict(load_trainer_state(self._resumed_from)["fully_async"])
        return step


def queue_contents(trainer: FullyAsyncRayTrainer) -> list[DataProto]:
    """The samples waiting in the queue (for inspection and tests)."""
    return [s.data for s in trainer.coord.queue.contents()]


__all__ = ["SUMMARY_FILE", "FullyAsyncRayTrainer", "queue_contents"]
