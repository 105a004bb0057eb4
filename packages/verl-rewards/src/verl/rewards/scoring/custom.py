"""Load a user's scoring function from ``reward.custom_reward_function.path`` / ``.name``."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

import cloudpickle

SIGNATURE = "compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)"
BATCH_SIGNATURE = "compute_score(data_sources, solution_strs, ground_truths, extra_infos, **kwargs)"


def load_custom_reward_function(
    path: str, name: str = "compute_score", reward_kwargs: dict | None = None, batched: bool = False
) -> Callable[..., Any]:
    """Import ``name`` from the Python file ``path`` and check it can be called as a scorer.

    ``reward_kwargs`` are bound as keyword arguments. ``batched`` checks the batch-manager signature
    (lists by keyword) instead of the per-sample one.
    """
    where = "reward.custom_reward_function.path"
    if not path:
        raise ValueError(f"{where} is empty")
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{where}={path!r}: no such file")
    mod_name = "verl_custom_reward_" + hashlib.sha1(path.encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{where}={path!r} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[mod_name]
        raise ImportError(f"importing {where}={path!r} failed: {type(e).__name__}: {e}") from e
    # Worker processes (prime manager, time limiter) cannot import this module by name: ship it by value.
    cloudpickle.register_pickle_by_value(module)
    fn = getattr(module, name, None)
    if fn is None or not callable(fn):
        found = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        raise AttributeError(
            f"reward.custom_reward_function.name={name!r} is not a function in {path}; functions there: {found}"
        )
    kwargs = dict(reward_kwargs or {})
    _check_signature(fn, name, path, kwargs, batched)
    return functools.partial(fn, **kwargs) if kwargs else fn


def _check_signature(fn: Callable, name: str, path: str, kwargs: dict, batched: bool) -> None:
    sig = inspect.signature(fn)
    try:
        if batched:
            sig.bind(data_sources=[], solution_strs=[], ground_truths=[], extra_infos=[], **kwargs)
        else:
            sig.bind("data_source", "solution", "ground_truth", extra_info=None, **kwargs)
    except TypeError as e:
        want = BATCH_SIGNATURE if batched else SIGNATURE
        extra = f" with reward_kwargs {sorted(kwargs)}" if kwargs else ""
        raise TypeError(f"{name}{sig} in {path} cannot be called as {want}{extra}: {e}") from e
