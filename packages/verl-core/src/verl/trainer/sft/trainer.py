"""The SFT loop on the single controller: a Ray worker group of ``WORKER_CLASSES["sft"]`` workers.

Workers are laid out as in RL (``trainer.nnodes`` x ``trainer.n_gpus_per_node``, one per device, CPU
workers with ``trainer.device=cpu``), so one config style and one mental model serve both trainers.
Each step: the driver takes ``data.train_batch_size`` conversations, counts the target tokens of the
whole batch, and calls ``train_batch`` (split across workers); the summed per-worker losses are the
token-mean cross-entropy over assistant tokens. Checkpoints are atomic ``global_step_N`` folders:

    global_step_N/model/          the engine checkpoint (sharded model + optimizer + LR schedule + RNG)
    global_step_N/huggingface/    model + tokenizer for from_pretrained / actor_rollout_ref.model.path
    global_step_N/trainer_state.pt    step and data position, for exact resume
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
from omegaconf import DictConfig

from verl.protocol import DataProto
from verl.trainer.config.loader import config_to_yaml
from verl.trainer.sft.config import sft_world_size
from verl.utils.checkpoint import (
    atomic_checkpoint,
    find_latest_ckpt_path,
    get_rng_state,
    load_trainer_state,
    prune_checkpoints,
    save_trainer_state,
    set_rng_state,
)
from verl.utils.dataset.loader import StatefulPromptLoader
from verl.utils.dataset.sft_dataset import sft_collate_fn
from verl.utils.tracking import Tracking

CONFIG_FILE = "config.yaml"


class SFTTrainer:
    """Drives SFT workers. ``config`` is the validated, read-only SFT config; datasets are `SFTDataset`s.

    ``worker_cls`` defaults to ``WORKER_CLASSES["sft"]`` (provided by verl-workers).
    """

    def __init__(self, config: DictConfig, train_dataset: Any, val_dataset: Any = None, worker_cls: Any = None):
        self.config = config
        self.train_dataset = train_dataset
        self.val_dataset = val_dataset
        if worker_cls is None:
            from verl.registries import WORKER_CLASSES

            worker_cls = WORKER_CLASSES.get("sft")
        self.worker_cls = worker_cls
        d = config.data
        collate = functools.partial(sft_collate_fn, pad_token_id=train_dataset.pad_token_id)
        self.train_loader = StatefulPromptLoader(
            train_dataset, batch_size=int(d.train_batch_size), shuffle=bool(d.shuffle), seed=int(d.seed),
            drop_last=True, collate_fn=collate,
        )
        self.val_loader = None
        if val_dataset is not None:
            self.val_loader = StatefulPromptLoader(
                val_dataset, batch_size=int(d.val_batch_size or d.train_batch_size), shuffle=False,
                drop_last=False, collate_fn=collate,
            )
        per_epoch = len(self.train_loader)
        t = config.trainer
        self.total_training_steps = (
            int(t.total_training_steps) if t.total_training_steps is not None else per_epoch * int(t.total_epochs)
        )
        self.global_step = 0
        self.wg = None

    @property
    def output_dir(self) -> str:
        return self.config.trainer.default_local_dir

    # ------------------------------------------------------------------------------------ workers
    def init_workers(self) -> None:
        """Start one worker per device (``nnodes`` x ``n_gpus_per_node``) and build the engines.
        ``trainer.worker_backend=local``: the one worker in this process (no Ray)."""
        from verl.trainer.config import resolve_device

        t = self.config.trainer
        device = resolve_device(self.config)
        kwargs = dict(config=self.config, total_training_steps=self.total_training_steps, device=device)
        if t.worker_backend == "local":
            from verl.single_controller.base.worker_group import ClassWithInitArgs
            from verl.single_controller.local import LocalWorkerGroup
            from verl.utils.cpu_threads import available_cpus, set_torch_threads

            set_torch_threads(available_cpus())  # the worker computes in this process
            self.wg = LocalWorkerGroup(ClassWithInitArgs(self.worker_cls, **kwargs))
            self.wg.init_model()
            return
        from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

        use_gpu = device == "cuda"
        pool = RayResourcePool(
            process_on_nodes=[int(t.n_gpus_per_node)] * int(t.nnodes), use_gpu=use_gpu, max_colocate_count=1,
            name_prefix="sft", num_cpus_per_worker=1.0 if use_gpu else 0.1,
        )
        cia = RayClassWithInitArgs(cls=self.worker_cls, **kwargs)
        self.wg = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=cia)
        self.wg.init_model()

    def shutdown(self) -> None:
        """Stop the workers and release their resources (e.g. before RL starts in the same Ray session)."""
        if self.wg is None:
            return
        if self.config.trainer.worker_backend == "local":
            self.wg = None  # the worker and its model go with the last reference
            return
        import ray

        for worker in self.wg.workers:
            ray.kill(worker)
        self.wg.resource_pool.remove()
        self.wg = None

    # --------------------------------------------------------------------------------------- steps
    def train_step(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One optimizer step over a collated batch; returns ``train/loss``, ``train/grad_norm``, ``train/lr``."""
        tokens = int(batch["loss_mask"][:, 1:].sum())
        if tokens == 0:
            raise ValueError("a training batch has no assistant tokens to train on")
        out = self.wg.train_batch(DataProto.from_dict(tensors=batch, meta_info={"global_tokens": tokens}))
        m = out.meta_info["metrics"]
        return {
            "train/loss": float(sum(m["train/loss"])),
            "train/grad_norm": float(m["train/grad_norm"][0]),
            "train/lr": float(m["train/lr"][0]),
            "train/tokens": float(tokens),
        }

    def validate(self) -> dict[str, float]:
        """``val/loss``: token-mean NLL of the assistant tokens of the validation set."""
        if self.val_loader is None:
            return {}
        nll = tokens = 0.0
        ws = sft_world_size(self.config)
        for batch in self.val_loader:
            batch = _pad_rows(batch, ws)
            m = self.wg.eval_batch(DataProto.from_dict(tensors=batch)).meta_info["metrics"]
            nll += sum(m["val/nll_sum"])
            tokens += sum(m["val/tokens"])
        return {"val/loss": nll / max(tokens, 1.0)}

    # --------------------------------------------------------------------------------- checkpoints
    def save_checkpoint(self) -> str:
        """Save ``global_step_N`` atomically (engine state, HF folder, trainer state); returns its path."""
        t = self.config.trainer
        with atomic_checkpoint(self.output_dir, self.global_step) as tmp:
            self.wg.save_checkpoint(os.path.join(tmp, "model"), self.global_step)
            if t.save_hf_model:
                self.wg.save_hf_model(os.path.join(tmp, "huggingface"))
            save_trainer_state(tmp, {"global_step": self.global_step, "loader": self.train_loader.state_dict(),
                                     "rng": get_rng_state()})
        prune_checkpoints(self.output_dir, t.max_ckpt_to_keep)
        return os.path.join(self.output_dir, f"global_step_{self.global_step}")

    def _resume(self) -> None:
        t = self.config.trainer
        if t.resume_mode == "disable":
            return
        path = find_latest_ckpt_path(self.output_dir) if t.resume_mode == "auto" else str(t.resume_from_path)
        if path is None:
            return
        if not os.path.isdir(path):
            raise FileNotFoundError(f"trainer.resume_from_path={path!r}: no such checkpoint directory")
        state = load_trainer_state(path)
        self.wg.load_checkpoint(os.path.join(path, "model"))
        self.train_loader.load_state_dict(state["loader"])
        set_rng_state(state["rng"])
        self.global_step = int(state["global_step"])
        print(f"resumed SFT from {path} at step {self.global_step}", flush=True)

    # ----------------------------------------------------------------------------------------- fit
    def fit(self) -> dict[str, Any]:
        """Train to ``total_training_steps``; returns ``{"metrics", "checkpoint", "hf_model"}`` of the end."""
        if self.wg is None:
            self.init_workers()
        self._resume()
        t = self.config.trainer
        os.makedirs(self.output_dir, exist_ok=True)
        with open(os.path.join(self.output_dir, CONFIG_FILE), "w") as f:
            f.write(config_to_yaml(self.config))
        logger = Tracking(project_name=t.project_name, experiment_name=t.experiment_name,
                          default_backend=list(t.logger), config=self.config, output_dir=self.output_dir)
        total = self.total_training_steps
        bar = None
        if t.progress_bar:
            from tqdm import tqdm

            bar = tqdm(total=total, initial=self.global_step, desc="SFT", unit="step", dynamic_ncols=True)
        metrics: dict[str, float] = {}
        ckpt = None
        data_iter = None
        try:
            while self.global_step < total:
                if data_iter is None:
                    data_iter = iter(self.train_loader)
                batch = next(data_iter, None)
                if batch is None:  # epoch ended; the loader moved to the next one
                    data_iter = None
                    continue
                self.global_step += 1
                metrics = self.train_step(batch)
                is_last = self.global_step == total
                if self.val_loader is not None and (is_last or (t.test_freq > 0 and self.global_step % t.test_freq == 0)):
                    metrics.update(self.validate())
                if is_last or (t.save_freq > 0 and self.global_step % t.save_freq == 0):
                    ckpt = self.save_checkpoint()
                metrics["train/epoch"] = float(self.train_loader.epoch)
                logger.log(metrics, step=self.global_step)
                if bar is not None:
                    bar.set_postfix({"loss": f"{metrics['train/loss']:.3f}"}, refresh=False)
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
            logger.finish()
        if ckpt is None:  # resumed at the end already: the newest checkpoint is the result
            ckpt = find_latest_ckpt_path(self.output_dir)
        hf = os.path.join(ckpt, "huggingface") if ckpt and t.save_hf_model else None
        return {"metrics": metrics, "checkpoint": ckpt, "hf_model": hf}


def _pad_rows(batch: dict[str, torch.Tensor], divisor: int) -> dict[str, torch.Tensor]:
    """Append copies of row 0 with ``loss_mask`` 0 until the row count divides ``divisor`` (they add
    nothing to the loss, unlike the dispatcher's own padding, which repeats real rows)."""
    rows = batch["input_ids"].shape[0]
    extra = -rows % divisor
    if not extra:
        return batch
    out = {k: torch.cat([v, v[:1].repeat(extra, *([1] * (v.dim() - 1)))]) for k, v in batch.items()}
    out["loss_mask"][rows:] = 0
    return out
