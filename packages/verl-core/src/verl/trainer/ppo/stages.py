"""The trainer's I/O around the loop: data loading, validation, tracking, checkpoint and resume.

Mixed into ``RayPPOTrainer``; every method here is a hook a subclass may override on its own.
"""

from __future__ import annotations

import os
import uuid
from collections import defaultdict
from typing import Any

import numpy as np

from verl.protocol import DataProto
from verl.trainer.ppo.dumps import (
    decode_texts,
    generation_records,
    ground_truths,
    pick_samples,
    write_generations,
)
from verl.trainer.ppo.metric_utils import val_metrics_dict
from verl.trainer.ppo.reward import compute_reward
from verl.utils.checkpoint import (
    TRAINER_STATE_FILE,
    atomic_checkpoint,
    find_latest_ckpt_path,
    get_rng_state,
    load_trainer_state,
    prune_checkpoints,
    save_trainer_state,
    set_rng_state,
)
from verl.utils.tracking import Tracking


class NothingToTrainError(RuntimeError):
    """A run was asked to continue from a checkpoint that already reached its last step."""


#: Keys a resumed run must keep: the checkpoint's weights, optimizer, LR schedule or data position are only
#: meaningful with them (a new ``optim.lr`` would be silently overridden by the restored schedule; a new
#: batch size or data file would make the saved data position point elsewhere). Everything else may change,
#: e.g. ``trainer.total_training_steps`` / ``total_epochs`` (grow the run; the LR schedule follows the new
#: total), ``save_freq``, ``test_freq``, ``logger``, micro batch sizes, the worker count (DCP reshards).
RESUME_FIXED_KEYS = (
    "actor_rollout_ref.model.path",
    "critic.model.path",
    "data.train_files",
    "data.train_batch_size",
    "data.gen_batch_size",
    "data.shuffle",
    "data.seed",
    "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.optim.lr",
    "critic.optim.lr",
    "algorithm.adv_estimator",
)


def resume_identity(config: Any) -> dict[str, Any]:
    """The values of `RESUME_FIXED_KEYS` in ``config`` (plain Python), saved with every checkpoint."""
    from omegaconf import OmegaConf

    out = {}
    for key in RESUME_FIXED_KEYS:
        value = OmegaConf.select(config, key, default=None)
        out[key] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    return out


def check_resume_identity(saved: dict[str, Any] | None, config: Any, state_file: str) -> None:
    """Refuse to resume when a key of `RESUME_FIXED_KEYS` differs from the checkpoint's run."""
    if saved is None:  # a checkpoint written before the identity was recorded
        return
    now = resume_identity(config)
    changed = [f"{k}: {saved[k]!r} in the checkpoint, {now[k]!r} now" for k in saved if k in now and saved[k] != now[k]]
    if changed:
        raise ValueError(
            f"cannot resume from {state_file}: " + "; ".join(changed) + ". These keys cannot change on resume "
            f"({', '.join(RESUME_FIXED_KEYS)}); keys such as trainer.total_training_steps, trainer.total_epochs, "
            "trainer.save_freq and trainer.test_freq may. Restore the old values, or start a new run with "
            "trainer.resume_mode=disable or another trainer.default_local_dir."
        )


class TrainerIOMixin:
    """Data, validation, logging and checkpoints for ``RayPPOTrainer`` (expects its attributes)."""

    # ----------------------------------------------------------------------------------------- data
    def _build_loader(self, dataset: Any, batch_size: int, shuffle: bool, seed: int, collate_fn: Any,
                      drop_last: bool, sampler: Any = None) -> Any:
        """A resumable loader (``state_dict``/``load_state_dict``, ``len`` = batches per epoch)."""
        from verl.utils.dataset import create_rl_dataloader  # the dataset helper's stateful loader

        return create_rl_dataloader(dataset, batch_size=batch_size, shuffle=shuffle, seed=seed,
                                    collate_fn=collate_fn, drop_last=drop_last, sampler=sampler,
                                    num_workers=int(self.config.data.dataloader_num_workers))

    def _create_dataloader(self, train_dataset: Any, val_dataset: Any, collate_fn: Any, train_sampler: Any) -> None:
        """Build the resumable train loader and the val loader; compute the total step count once."""
        cfg = self.config
        if train_dataset is None:
            raise ValueError("RayPPOTrainer needs train_dataset (main_ppo builds it from data.train_files)")
        self.train_dataloader = self._build_loader(
            train_dataset, cfg.data.gen_batch_size, cfg.data.shuffle, cfg.data.seed, collate_fn, True, train_sampler
        )
        self.val_dataloader = None
        if val_dataset is not None:
            val_bs = cfg.data.val_batch_size or len(val_dataset)
            self.val_dataloader = self._build_loader(
                val_dataset, val_bs, cfg.data.validation_shuffle, cfg.data.seed, collate_fn, False
            )
        steps_per_epoch = len(self.train_dataloader)
        if steps_per_epoch == 0:
            raise ValueError(
                f"the training set has {len(train_dataset)} prompts, fewer than one batch of "
                f"data.gen_batch_size={cfg.data.gen_batch_size}; lower the batch size or add data"
            )
        total = steps_per_epoch * int(cfg.trainer.total_epochs)
        if cfg.trainer.total_training_steps is not None and int(cfg.trainer.total_training_steps) > 0:
            total = int(cfg.trainer.total_training_steps)
        # Computed once, passed to the workers as a constructor keyword; the config is never written.
        self.total_training_steps = total
        self.epoch = 0
        self._batches_consumed = 0
        self._train_iter = None
        self._resumed_from: str | None = None  # the checkpoint dir fit() resumed from

    def _next_batch(self) -> dict:
        """The next prompt batch; a new pass over the data starts when one runs out.

        ``self.epoch`` is the epoch of the batch just served, counted from the batches consumed so far
        (saved in checkpoints), so it stays right across resumes at an epoch boundary and when a step
        consumes several batches (dynamic sampling).
        """
        for _ in range(2):
            if self._train_iter is None:
                self._train_iter = iter(self.train_dataloader)
            try:
                batch = next(self._train_iter)
            except StopIteration:
                self._train_iter = None
                continue
            self._batches_consumed += 1
            self.epoch = (self._batches_consumed - 1) // len(self.train_dataloader)
            return batch
        raise RuntimeError("the train dataloader yielded no batch twice in a row; is the dataset empty?")

    # ----------------------------------------------------------------------------------- validation
    def _validate(self) -> dict[str, float]:
        """Generate for the validation set with ``rollout.val_kwargs`` and score it with val_reward_fn.

        Returns upstream's metrics (``val-core/<data_source>/<var>/mean@N``, ``best@k``, ``maj@k`` ...,
        see ``val_metrics``) for ``reward`` and every numeric key the reward function returns, plus
        ``val/<data_source>/reward``, the mean score, which the progress bar and the reward plot read.
        With ``trainer.validation_data_dir`` every sample goes to ``{dir}/{step}.jsonl``; with
        ``trainer.log_val_generations=N``, N of them to the trackers as a table (``ppo.dumps``).
        """
        if self.val_dataloader is None:
            return {}
        t = self.config.trainer
        val_kwargs = self.config.actor_rollout_ref.rollout.val_kwargs
        scores: list[float] = []
        sources: list[str] = []
        uids: list[str] = []
        turns: list[int] = []
        infos: dict[str, list] = defaultdict(list)
        texts: dict[str, list] = defaultdict(list)  # inputs, outputs, gts: only when a dump asks for them
        for batch_dict in self.val_dataloader:
            batch = DataProto.from_single_dict(batch_dict)
            if "uid" not in batch.non_tensor_batch:
                # one id per prompt, shared by its val_kwargs.n responses (the groups of best@k / maj@k)
                batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
            batch = batch.repeat(val_kwargs.n, interleave=True)
            gen_batch = self._gen_input(batch, do_sample=val_kwargs.do_sample, validate=True)
            output = self.actor_rollout_wg.generate_sequences(gen_batch)
            batch.pop(batch_keys=["input_ids", "attention_mask", "position_ids"])
            batch.union(DataProto(batch=output.batch, non_tensor_batch=output.non_tensor_batch, meta_info={}))
            reward_tensor, extra = compute_reward(batch, self.val_reward_fn)
            batch_scores = reward_tensor.sum(-1).tolist()
            _extend_infos(infos, len(scores), {**extra, "reward": batch_scores}, len(batch_scores))
            if t.validation_data_dir or t.log_val_generations > 0:
                inputs, outputs = decode_texts(batch, self.tokenizer)
                texts["inputs"] += inputs
                texts["outputs"] += outputs
                texts["gts"] += ground_truths(batch)
            scores.extend(batch_scores)
            sources.extend(batch.non_tensor_batch.get("data_source", np.array(["unknown"] * len(batch), dtype=object)))
            uids.extend(batch.non_tensor_batch["uid"])
            if "__num_turns__" in batch.non_tensor_batch:
                turns.extend(int(n) for n in batch.non_tensor_batch["__num_turns__"])
        if t.log_val_generations > 0:
            samples = pick_samples(texts["inputs"], texts["outputs"], scores, int(t.log_val_generations))
            self.logger.log_generations(samples, step=self.global_steps)
        if t.validation_data_dir:
            extra_all = {k: v for k, v in infos.items() if k != "reward"}
            records = generation_records(texts["inputs"], texts["outputs"], texts["gts"], scores, extra_all,
                                         self.global_steps)
            write_generations(t.validation_data_dir, self.global_steps, records)
        metrics = self._val_metrics_update(sources, uids, infos, turns)
        by_source: dict[str, list[float]] = defaultdict(list)
        for src, score in zip(sources, scores):
            by_source[str(src)].append(score)
        metrics.update({f"val/{src}/reward": float(np.mean(v)) for src, v in by_source.items()})
        return metrics

    def _val_metrics_update(self, data_sources: list, sample_uids: list, reward_extra_infos_dict: dict,
                            sample_turns: list) -> dict[str, float]:
        """Upstream's hook: the flat ``val-core`` / ``val-aux`` metrics of one validation pass."""
        return val_metrics_dict(data_sources, sample_uids, reward_extra_infos_dict, sample_turns)

    # ------------------------------------------------------------------------------------ tracking
    @property
    def output_dir(self) -> str:
        """Where metrics, plots and checkpoints of this run go (``trainer.default_local_dir``)."""
        return self.config.trainer.default_local_dir

    def _make_logger(self) -> Tracking:
        t = self.config.trainer
        return Tracking(
            project_name=t.project_name, experiment_name=t.experiment_name, default_backend=list(t.logger),
            config=self.config, output_dir=self.output_dir,
            # rows a killed run logged past its checkpoint are dropped: they are trained and logged again
            resume_step=self.global_steps if self._resumed_from is not None else None,
        )

    def _progress_bar(self, initial: int, total: int):
        if not self.config.trainer.progress_bar:
            return None
        from tqdm import tqdm

        return tqdm(total=total, initial=initial, desc="Training", unit="step", dynamic_ncols=True)

    def _advance_progress(self, bar, metrics: dict) -> None:
        if bar is None:
            return
        postfix = {"reward": f"{metrics.get('critic/score/mean', float('nan')):.3f}"}
        for k, v in metrics.items():
            if k.startswith("val/") and k.endswith("/reward"):
                postfix[k.removeprefix("val/")] = f"{v:.3f}"
        bar.set_postfix(postfix, refresh=False)
        bar.update(1)

    # --------------------------------------------------------------------------------- checkpoints
    def _trainer_state(self) -> dict[str, Any]:
        return {
            "global_step": self.global_steps,
            "epoch": self.epoch,
            "batches_consumed": self._batches_consumed,
            "dataloader": self.train_dataloader.state_dict(),
            "rng": get_rng_state(),
            "kl_ctrl": self.kl_ctrl_in_reward.state_dict() if self.kl_ctrl_in_reward is not None else None,
            "total_training_steps": self.total_training_steps,
            "resume_identity": resume_identity(self.config),
        }

    def _save_checkpoint(self) -> str:
        """Save ``global_step_{N}`` atomically: workers fill ``actor/`` and ``critic/``, the driver its
        ``trainer_state.pt``; then prune to ``max_actor_ckpt_to_keep`` / ``max_critic_ckpt_to_keep``."""
        t = self.config.trainer
        root = t.default_local_dir
        with atomic_checkpoint(root, self.global_steps) as tmp:
            self._save_worker_checkpoints(tmp)
            save_trainer_state(tmp, self._trainer_state())
        limits = [x for x in (t.max_actor_ckpt_to_keep, t.max_critic_ckpt_to_keep) if x is not None and x > 0]
        keep = max(limits) if limits else None
        prune_checkpoints(root, keep, {"actor": t.max_actor_ckpt_to_keep, "critic": t.max_critic_ckpt_to_keep})
        return os.path.join(root, f"global_step_{self.global_steps}")

    def _save_worker_checkpoints(self, ckpt_dir: str) -> None:
        """Each trained role saves into its subfolder of ``ckpt_dir`` (``actor/``, ``critic/``).

        A hook: a recipe that trains another model (e.g. an online reward model) extends it, and
        `_load_worker_checkpoints` with it. Pruning is the driver's job (whole dirs): max_ckpt_to_keep=None.
        """
        self.actor_rollout_wg.save_checkpoint(os.path.join(ckpt_dir, "actor"), self.global_steps, None)
        if self.use_critic:
            self.critic_wg.save_checkpoint(os.path.join(ckpt_dir, "critic"), self.global_steps, None)

    def _load_worker_checkpoints(self, ckpt_dir: str) -> None:
        """Load what `_save_worker_checkpoints` wrote (a hook, extended together with it)."""
        self.actor_rollout_wg.load_checkpoint(os.path.join(ckpt_dir, "actor"))
        if self.use_critic:
            self.critic_wg.load_checkpoint(os.path.join(ckpt_dir, "critic"))

    def _resume_path(self) -> str | None:
        t = self.config.trainer
        if t.resume_mode == "disable":
            return None
        if t.resume_mode == "auto":
            return find_latest_ckpt_path(t.default_local_dir)
        if t.resume_mode == "resume_path":
            path = str(t.resume_from_path)
            if not os.path.basename(os.path.normpath(path)).startswith("global_step_"):
                raise ValueError(f"trainer.resume_from_path={path!r} must be a global_step_N directory")
            if not os.path.isdir(path):
                raise FileNotFoundError(f"trainer.resume_from_path={path!r}: no such directory")
            return path
        raise ValueError(f"trainer.resume_mode={t.resume_mode!r}; expected auto, disable or resume_path")

    def check_steps_remaining(self) -> int:
        """Steps left after resuming (reads only ``trainer_state.pt``, so it can run before the
        workers start). Raises `NothingToTrainError` when there are none."""
        path = self._resume_path()
        done = 0
        if path is not None:
            state = load_trainer_state(path)
            check_resume_identity(state.get("resume_identity"), self.config, os.path.join(path, TRAINER_STATE_FILE))
            done = int(state["global_step"])
        total = self.total_training_steps
        if done >= total:
            t = self.config.trainer
            raise NothingToTrainError(
                f"nothing to train: the checkpoint in {path} is at step {done} and the run ends at step "
                f"{total} (trainer.total_epochs={t.total_epochs}, trainer.total_training_steps="
                f"{t.total_training_steps}, {len(self.train_dataloader)} batches per epoch). Raise "
                f"total_epochs/total_training_steps to train further, or start over with "
                f"trainer.resume_mode=disable or another trainer.default_local_dir."
            )
        return total - done

    def _load_checkpoint(self) -> int:
        """Restore step, data position, RNG, KL controller and the workers' state; returns the step."""
        self._resumed_from = None
        path = self._resume_path()
        if path is None:
            return 0
        state = load_trainer_state(path)
        self.global_steps = int(state["global_step"])
        self.epoch = int(state["epoch"])
        self._batches_consumed = int(state["batches_consumed"])
        self._load_worker_checkpoints(path)
        self.train_dataloader.load_state_dict(state["dataloader"])
        self._train_iter = None
        set_rng_state(state["rng"])
        if self.kl_ctrl_in_reward is not None and state["kl_ctrl"] is not None:
            self.kl_ctrl_in_reward.load_state_dict(state["kl_ctrl"])
        self._resumed_from = path
        print(f"resumed from {path} at step {self.global_steps} (epoch {self.epoch})", flush=True)
        return self.global_steps


def _extend_infos(infos: dict[str, list], rows_before: int, batch_infos: dict[str, list], rows: int) -> None:
    """Append one batch's per-sample values; a key missing on either side is filled with None (skipped
    by the metrics), so every list stays aligned with the samples (compute_reward checked the lengths)."""
    for key, values in batch_infos.items():
        if key not in infos:
            infos[key] = [None] * rows_before
        infos[key].extend(values)
    for key, values in infos.items():
        if key not in batch_infos:
            values.extend([None] * rows)
