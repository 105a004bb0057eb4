"""Reward on the driver: build the reward manager from config and call it on a batch.

The manager comes from ``verl.registries.REWARD_MANAGERS`` (filled by verl-rewards); a custom scorer
``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)`` can be loaded from a
Python file named in ``reward.custom_reward_function.path``.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
from omegaconf import OmegaConf

from verl.protocol import DataProto


def get_custom_reward_fn(config: Any) -> Callable | None:
    """The function ``reward.custom_reward_function.name`` from the file ``.path``, or None when unset.

    Extra ``reward.custom_reward_function.reward_kwargs`` are bound as keyword arguments.
    """
    spec_cfg = config.reward.custom_reward_function
    path = spec_cfg.path
    if not path:
        return None
    if not os.path.isfile(path):
        raise FileNotFoundError(f"reward.custom_reward_function.path={path!r}: no such file")
    module_name = f"custom_reward_module_{abs(hash(os.path.abspath(path)))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # so Ray can pickle functions defined there by reference
    spec.loader.exec_module(module)
    name = spec_cfg.name
    if not hasattr(module, name):  # a user file, not our object: say which names exist
        public = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))]
        raise AttributeError(f"reward.custom_reward_function.name={name!r} is not defined in {path}; it defines {public}")
    fn = getattr(module, name)
    kwargs = dict(spec_cfg.reward_kwargs or {})
    return functools.partial(fn, **kwargs) if kwargs else fn


def load_reward_manager(config: Any, tokenizer: Any, num_examine: int, **reward_kwargs: Any) -> Callable:
    """Instantiate ``REWARD_MANAGERS[reward.reward_manager]`` with the contract's constructor arguments.

    Raises the registry's error (naming ``verl-rewards``) when the manager is not installed.
    """
    from verl.registries import REWARD_MANAGERS

    manager_cls = REWARD_MANAGERS.get(config.reward.reward_manager)
    kwargs = dict(config.reward.reward_kwargs or {})
    if config.reward.overlong_buffer.enable:
        # Overlong shaping needs the response budget; a manager without it (e.g. `naive`) rejects these
        # options with an error naming them, instead of silently training without the penalty.
        kwargs["overlong_buffer"] = OmegaConf.to_container(config.reward.overlong_buffer, resolve=True)
        kwargs["max_resp_len"] = int(config.data.max_response_length)
    kwargs.update(reward_kwargs)
    return manager_cls(
        tokenizer=tokenizer,
        num_examine=num_examine,
        compute_score=get_custom_reward_fn(config),
        reward_fn_key=config.data.reward_fn_key,
        **kwargs,
    )


def compute_reward(data: DataProto, reward_fn: Callable) -> tuple[torch.Tensor, dict[str, list]]:
    """Call ``reward_fn(data, return_dict=True)`` and check the result against the contract.

    Returns ``(reward_tensor [N, R], reward_extra_info {key: list of N})``.
    """
    result = reward_fn(data, return_dict=True)
    if not isinstance(result, dict) or "reward_tensor" not in result:
        raise TypeError(
            f"reward function {reward_fn!r} returned {type(result).__name__}; with return_dict=True it must "
            f"return {{'reward_tensor': [N, R] tensor, 'reward_extra_info': {{key: list}}}}"
        )
    reward_tensor = result["reward_tensor"]
    expected = tuple(data.batch["responses"].shape)
    if tuple(reward_tensor.shape) != expected:
        raise ValueError(
            f"reward function {reward_fn!r} returned reward_tensor of shape {tuple(reward_tensor.shape)}; "
            f"expected {expected} (rows x response length)"
        )
    extra = dict(result.get("reward_extra_info") or {})
    for key, values in extra.items():
        if len(values) != len(data):
            raise ValueError(f"reward_extra_info[{key!r}] has {len(values)} entries for {len(data)} rows")
    return reward_tensor, extra
