"""Interactions: a simulated user or environment that answers each assistant turn
(upstream: ``verl.interactions.base.BaseInteraction``).

Configured by a YAML file:

    interaction:
      - name: gsm8k                                          # rows pick it by interaction_kwargs.name
        class_name: verl.agent.interactions.gsm8k.Gsm8kInteraction   # dotted path or INTERACTIONS name
        config: {}
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml
from verl.registries import INTERACTIONS


class BaseInteraction:
    """Subclass and override `generate_response` (and usually `calculate_score`)."""

    def __init__(self, config: dict[str, Any] | None = None):
        self.config = dict(config or {})
        self.name = self.config.get("name", type(self).__name__)
        self._instances: dict[str, dict[str, Any]] = {}

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        """Begin one conversation; ``kwargs`` are the row's ``interaction_kwargs``."""
        instance_id = instance_id or str(uuid.uuid4())
        self._instances[instance_id] = dict(kwargs)
        return instance_id

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        """Answer the conversation so far: (should_terminate, reply content, turn score, extra)."""
        raise NotImplementedError(f"{type(self).__name__}.generate_response")

    async def calculate_score(self, instance_id: str, **kwargs: Any) -> float:
        return 0.0

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        self._instances.pop(instance_id, None)


def load_interactions(path: str | Path) -> dict[str, BaseInteraction]:
    """``{name: interaction}`` for every entry of the YAML file at ``path``."""
    from verl.agent.tools.loader import resolve_class

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"interaction config {path}: no such file")
    data = yaml.safe_load(path.read_text()) or {}
    entries = data.get("interaction")
    if not isinstance(entries, list):
        raise ValueError(f"interaction config {path}: expected a top-level 'interaction:' list")
    out: dict[str, BaseInteraction] = {}
    for i, entry in enumerate(entries):
        where = f"interaction config {path}, interaction[{i}]"
        if not isinstance(entry, dict) or "class_name" not in entry:
            raise ValueError(
                f"{where}: each interaction needs 'class_name' (and optionally 'name', 'config')"
            )
        cls = resolve_class(entry["class_name"], INTERACTIONS, where)
        name = entry.get("name") or cls.__name__.removesuffix("Interaction").lower()
        if name in out:
            raise ValueError(f"{where}: interaction name {name!r} is used twice")
        out[name] = cls({**(entry.get("config") or {}), "name": name})
    return out
