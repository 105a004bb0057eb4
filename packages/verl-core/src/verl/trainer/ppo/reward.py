"""Reward on the driver: build the reward manager from config and call it on a batch.

``load_reward_manager`` is the one loader (``verl.rewards.load_reward_manager`` is a thin wrapper over
it for callers holding only the ``reward`` section). It reads::

    reward.reward_manager            name in verl.registries.REWARD_MANAGERS (default naive)
    reward.reward_kwargs             manager options; call-time **reward_kwargs override them.
                                     ``judge: {enable, ...}`` wraps the scorer with a generative judge
    reward.custom_reward_function    {path, name=compute_score, reward_kwargs}: the scorer
                                     ``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw)``
                                     (the ``batch`` manager: lists, by keyword)
    reward.overlong_buffer           {enable, len, penalty_factor, log}: passed with max_resp_len when enabled
    reward.sandbox                   {name, **options}: the built-in scorer's sandbox for code rows
    reward.reward_model.judge        read when present (same as reward_kwargs.judge)
    data.reward_fn_key               the non-tensor key naming each row's data source
    actor_rollout_ref.rollout.response_length (else data.max_response_length): max_resp_len

Missing keys take the defaults above, so a partial config (e.g. only a ``reward`` section) works.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from verl.utils.registry import Registry

if TYPE_CHECKING:  # torch / DataProto only for annotations: keep this module cheap to import
    import torch

    from verl.protocol import DataProto

# Scorer wrappers named by a manager option: ``fn(options: dict, compute_score | None) -> compute_score``.
# verl-rewards registers "judge" (a generative LLM judge); core never imports it by name.
SCORE_WRAPPERS: Registry[Callable[[dict, Callable | None], Callable]] = Registry(
    "reward score wrapper", {"judge": "verl-rewards"}
)

CUSTOM_SIGNATURE = "compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)"
CUSTOM_BATCH_SIGNATURE = "compute_score(data_sources, solution_strs, ground_truths, extra_infos, **kwargs)"


def _plain(x: Any) -> Any:
    return OmegaConf.to_container(x, resolve=True) if isinstance(x, DictConfig | ListConfig) else x


def _select(config: Any, key: str, default: Any = None) -> Any:
    """``config[a][b]...`` for a dotted key as plain Python, or ``default`` when a part is missing/None."""
    node = config
    for part in key.split("."):
        if isinstance(node, DictConfig):
            node = node.get(part)
        elif isinstance(node, Mapping):
            node = node.get(part)
        else:
            raise TypeError(
                f"reward loader: config at {key!r} is {type(node).__name__}, expected a mapping "
                f"(the trainer config, or {{'reward': ...}})"
            )
        if node is None:
            return default
    return _plain(node)


def load_custom_reward_function(
    path: str, name: str = "compute_score", reward_kwargs: Mapping | None = None, batched: bool = False
) -> Callable:
    """Import ``name`` from the Python file ``path`` and check it can be called as a scorer.

    ``reward_kwargs`` are bound as keyword arguments. ``batched`` checks the batch manager's signature
    (lists, by keyword) instead of the per-sample one.
    """
    where = "reward.custom_reward_function.path"
    if not path:
        raise ValueError(f"{where} is empty")
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{where}={path!r}: no such file")
    # Stable across processes (unlike hash()), so re-loading the same file reuses one module name.
    mod_name = "verl_custom_reward_" + hashlib.sha1(path.encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{where}={path!r} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # dataclasses etc. in the file look their module up while it executes
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[mod_name]
        raise ImportError(f"importing {where}={path!r} failed: {type(e).__name__}: {e}") from e
    _pickle_by_value(module)
    fn = getattr(module, name, None)  # a user file, not our object: say which names exist
    if fn is None or not callable(fn):
        found = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        raise AttributeError(
            f"reward.custom_reward_function.name={name!r} is not a function in {path}; functions there: {found}"
        )
    kwargs = dict(reward_kwargs or {})
    sig = inspect.signature(fn)
    try:
        if batched:
            sig.bind(data_sources=[], solution_strs=[], ground_truths=[], extra_infos=[], **kwargs)
        else:
            sig.bind("data_source", "solution", "ground_truth", extra_info=None, **kwargs)
    except TypeError as e:
        want = CUSTOM_BATCH_SIGNATURE if batched else CUSTOM_SIGNATURE
        extra = f" with reward_kwargs {sorted(kwargs)}" if kwargs else ""
        raise TypeError(f"{name}{sig} in {path} cannot be called as {want}{extra}: {e}") from e
    return functools.partial(fn, **kwargs) if kwargs else fn


def _pickle_by_value(module: Any) -> None:
    """Ray workers and scorer subprocesses cannot import the user's file by name: ship it by value.
    Ray's copy of cloudpickle where Ray is installed (it is not, on a local-backend machine), and the
    standalone one (verl-rewards' time limiter; not a core dependency) where that is."""
    import importlib

    for name in ("ray.cloudpickle", "cloudpickle"):
        try:
            pickler = importlib.import_module(name)
        except ImportError:
            continue
        pickler.register_pickle_by_value(module)


def get_custom_reward_fn(config: Any, batched: bool = False) -> Callable | None:
    """The scorer named by ``reward.custom_reward_function`` (``path``, ``name``, ``reward_kwargs``), or None."""
    custom = _select(config, "reward.custom_reward_function", {})
    if not custom.get("path"):
        return None
    return load_custom_reward_function(
        custom["path"],
        custom.get("name") or "compute_score",
        custom.get("reward_kwargs") or {},
        batched=batched,
    )


def takes_option(cls: type, param: str) -> bool:
    """Whether ``cls``'s constructor names ``param`` (a ``**kwargs`` catch-all does not count)."""
    return param in inspect.signature(cls).parameters


def _accepts(cls: type, param: str) -> bool:
    """Whether ``cls``'s constructor names ``param`` or has a ``**kwargs`` that may pass it on."""
    params = inspect.signature(cls).parameters.values()
    return takes_option(cls, param) or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def load_reward_manager(config: Any, tokenizer: Any, num_examine: int, **reward_kwargs: Any) -> Callable:
    """Instantiate ``REWARD_MANAGERS[reward.reward_manager]`` as
    ``cls(tokenizer, num_examine, compute_score=..., reward_fn_key=..., **options)``.

    ``options`` are ``reward.reward_kwargs`` updated by ``reward_kwargs``; the keys ``max_resp_len``
    (overrides the config's response length; used only with overlong shaping) and ``judge`` are
    consumed here. Raises the registry's error (naming ``verl-rewards``) when the manager is not
    installed, and ValueError when overlong shaping is enabled for a manager without it.
    """
    from verl.registries import REWARD_MANAGERS

    name = _select(config, "reward.reward_manager") or "naive"
    manager_cls = REWARD_MANAGERS.get(name)
    options = dict(_select(config, "reward.reward_kwargs", {}))
    call_kwargs = dict(reward_kwargs)
    max_resp_len = call_kwargs.pop("max_resp_len", None)

    overlong = dict(_select(config, "reward.overlong_buffer", {}))
    if overlong.get("enable"):
        # A manager must name overlong_buffer in its constructor to get it: `naive` & co would otherwise
        # fail on an unknown option, or (with a **kwargs catch-all) train silently without the penalty.
        if not takes_option(manager_cls, "overlong_buffer"):
            raise ValueError(
                f"reward.overlong_buffer.enable=true needs reward.reward_manager=dapo (got {name!r}: "
                f"{manager_cls.__qualname__} takes no overlong_buffer option)"
            )
        if max_resp_len is None:
            max_resp_len = _select(config, "actor_rollout_ref.rollout.response_length")
        if max_resp_len is None:
            max_resp_len = _select(config, "data.max_response_length")
        options["overlong_buffer"] = overlong
        options["max_resp_len"] = None if max_resp_len is None else int(max_resp_len)
    options.update(call_kwargs)

    compute_score = get_custom_reward_fn(config, batched=name == "batch")
    judge = dict(options.pop("judge", None) or _select(config, "reward.reward_model.judge", {}))
    if judge.get("enable"):
        compute_score = SCORE_WRAPPERS.get("judge")(judge, compute_score)

    sandbox = dict(_select(config, "reward.sandbox", {}))
    # The sandbox configures the built-in scorer's code rows (a custom scorer runs its own code). A
    # manager whose constructor takes neither score_kwargs nor **kwargs has no such scorer to configure.
    custom_path = _select(config, "reward.custom_reward_function.path")
    if sandbox and not custom_path and _accepts(manager_cls, "score_kwargs"):
        score_kwargs = dict(options.pop("score_kwargs", None) or {})
        score_kwargs.setdefault("sandbox", sandbox.pop("name", "local"))
        score_kwargs.setdefault("sandbox_options", sandbox)
        options["score_kwargs"] = score_kwargs

    reward_fn_key = _select(config, "data.reward_fn_key") or "data_source"
    return manager_cls(
        tokenizer, num_examine, compute_score=compute_score, reward_fn_key=reward_fn_key, **options
    )


def compute_reward(
    data: DataProto, reward_fn: Callable, metrics: dict | None = None
) -> tuple[torch.Tensor, dict[str, list]]:
    """Call ``reward_fn(data, return_dict=True)`` and check the result against the contract.

    Returns ``(reward_tensor [N, R], reward_extra_info {key: list of N})``; the result's
    ``reward_metrics`` (e.g. the agent rewards' means) are added to ``metrics`` when given.
    """
    return check_reward_result(data, reward_fn(data, return_dict=True), reward_fn, metrics)


def check_reward_result(
    data: DataProto, result: Any, reward_fn: Callable, metrics: dict | None = None
) -> tuple[torch.Tensor, dict[str, list]]:
    """`compute_reward`'s checks and return value for ``result``, what ``reward_fn`` returned for ``data``
    with ``return_dict=True`` (in one pass, or assembled by the reward loop)."""
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
    if metrics is not None:
        metrics.update({k: float(v) for k, v in (result.get("reward_metrics") or {}).items()})
    extra = dict(result.get("reward_extra_info") or {})
    for key, values in extra.items():
        if len(values) != len(data):
            raise ValueError(f"reward_extra_info[{key!r}] has {len(values)} entries for {len(data)} rows")
    return reward_tensor, extra
