"""Several roles in one worker process: the fused worker class (backend-neutral; no Ray here).

``create_colocated_worker_raw_cls({"actor": ClassWithInitArgs(ActorWorker, ...), "critic": ...})``
returns a plain ``Worker`` subclass named ``FusedWorker_actor_critic`` (upstream's name and layout):

- an instance builds every role's worker in its own process, keeps them in ``fused_worker_dict``
  (``{role: worker}``, also ``worker_dict``) and as attributes (``self.actor``), and hands each role
  worker the same dict as its ``fused_worker_dict`` so the roles can reach each other;
- role ``r``'s registered method ``m`` is also a registered method ``r_m`` of the fused class, so a
  worker group built on it binds ``group.actor_update_policy(...)``, and ``spawn`` / ``fuse`` give
  per-role views that call it as ``view.update_policy(...)``;
- ``_fuw_execute("r_fwmn_m", *args)`` calls role ``r``'s method ``m`` (upstream's by-name entry);
- the class carries ``raw_cls_dict`` (``{role: class}``) and ``is_fused_worker = True``.

A Ray backend wraps the class in its ``ClassWithInitArgs`` (``create_colocated_worker_cls``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from verl.single_controller.base.decorator import MAGIC_ATTR, registered_methods
from verl.single_controller.base.worker import Worker
from verl.single_controller.base.worker_group import ClassWithInitArgs

FUSED_WORKER_CLS_NAME = "FusedWorker"
#: separates the role from the method name in ``_fuw_execute`` ("fused worker method name")
FUSED_METHOD_SEP = "_fwmn_"


def _user_class(cls: Any) -> Any:
    # a @ray.remote class keeps the user's class here (Ray's attribute, not one of ours)
    return getattr(cls, "__ray_actor_class__", cls)


def _delegate(role: str, name: str, attrs: dict, is_async: bool):
    method: Callable[..., Any]
    if is_async:

        async def async_method(self, *args, **kwargs):
            return await getattr(self.fused_worker_dict[role], name)(*args, **kwargs)

        method = async_method
    else:

        def sync_method(self, *args, **kwargs):
            return getattr(self.fused_worker_dict[role], name)(*args, **kwargs)

        method = sync_method

    method.__name__ = f"{role}_{name}"
    # The role's own method already resolves futures; the group needs the dispatch settings.
    setattr(method, MAGIC_ATTR, dict(attrs))
    return method


class FusedWorker(Worker):
    """Base of the classes ``create_colocated_worker_raw_cls`` makes (see the module doc)."""

    is_fused_worker = True
    raw_cls_dict: dict[str, type] = {}
    _init_args: dict[str, tuple[tuple, dict]] = {}

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fused_worker_dict = {}
        for role, cls in self.raw_cls_dict.items():
            role_args, role_kwargs = self._init_args[role]
            self.fused_worker_dict[role] = cls(*role_args, **role_kwargs)
            setattr(self, role, self.fused_worker_dict[role])
        self.worker_dict = self.fused_worker_dict  # the name upstream's older WorkerDict used
        for worker in self.fused_worker_dict.values():
            worker.fused_worker_dict = self.fused_worker_dict

    def _fuw_execute(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``"<role>_fwmn_<method>"`` on that role's worker (synchronous methods)."""
        role, sep, name = method_name.partition(FUSED_METHOD_SEP)
        if not sep or role not in self.fused_worker_dict:
            raise ValueError(
                f"_fuw_execute({method_name!r}): expected '<role>{FUSED_METHOD_SEP}<method>' with a role in "
                f"{sorted(self.fused_worker_dict)}"
            )
        method = getattr(self.fused_worker_dict[role], name)
        if inspect.iscoroutinefunction(method):
            raise TypeError(f"{role}.{name} is async; call the registered method {role}_{name} instead")
        return method(*args, **kwargs)


def create_colocated_worker_raw_cls(class_dict: Mapping[str, ClassWithInitArgs]) -> type[FusedWorker]:
    """A ``Worker`` subclass that runs every role of ``class_dict`` in one process (module doc)."""
    if not class_dict:
        raise ValueError("create_colocated_worker_raw_cls needs at least one role")
    raw_cls_dict: dict[str, type] = {}
    init_args: dict[str, tuple[tuple, dict]] = {}
    for role, cia in class_dict.items():
        user_cls = _user_class(cia.cls)
        if not (isinstance(user_cls, type) and issubclass(user_cls, Worker)):
            raise TypeError(f"role {role!r}: {user_cls!r} must subclass verl.single_controller.base.Worker")
        if not role.isidentifier() or role in dir(FusedWorker):
            raise ValueError(f"role name {role!r} must be an identifier that is not a Worker attribute")
        raw_cls_dict[role] = user_cls
        init_args[role] = (tuple(cia.args), dict(cia.kwargs))

    namespace: dict[str, Any] = {"raw_cls_dict": raw_cls_dict, "_init_args": init_args}
    for role, user_cls in raw_cls_dict.items():
        for name, attrs in registered_methods(user_cls).items():
            func = inspect.getattr_static(user_cls, name)
            namespace[f"{role}_{name}"] = _delegate(role, name, attrs, inspect.iscoroutinefunction(func))
    clash = sorted(set(raw_cls_dict) & set(namespace))
    if clash:
        raise ValueError(f"role names {clash} equal a '<role>_<method>' name of another role; rename the role")
    name = "_".join([FUSED_WORKER_CLS_NAME, *raw_cls_dict])
    return type(name, (FusedWorker,), namespace)
