"""Registries that core consults and sibling distributions fill (see docs/contracts.md).

Core never imports verl.workers / verl.rewards / verl.agent by name: those packages register here
when their ``verl.plugins`` entry point is loaded (on the first lookup miss).
"""

from typing import Any

from verl.utils.registry import Registry

WORKER_CLASSES: Registry[type] = Registry(
    "worker class",
    {
        "actor_rollout_ref": "verl-workers",
        "critic": "verl-workers",
        "megatron_actor_rollout_ref": "verl-workers[megatron]",
        "megatron_critic": "verl-workers[megatron]",
        "sft": "verl-workers",
        "reward_model": "verl-rewards",
        "agent_actor_rollout_ref": "verl-agent",
    },
)
TRAINING_ENGINES: Registry[type] = Registry(
    "training engine", {"fsdp2": "verl-workers", "fsdp": "verl-workers", "megatron": "verl-workers[megatron]"}
)
ROLLOUT_ENGINES: Registry[type] = Registry(
    "rollout engine",
    {"native": "verl-workers", "hf": "verl-workers", "vllm": "verl-workers[vllm]", "sglang": "verl-workers[sglang]"},
)
REWARD_MANAGERS: Registry[Any] = Registry(
    "reward manager", {n: "verl-rewards" for n in ("naive", "batch", "dapo", "prime")}
)
AGENT_LOOPS: Registry[type] = Registry("agent loop", {"single_turn_agent": "verl-agent", "tool_agent": "verl-agent"})
# rollout.multi_turn.format: how the model writes tool calls (upstream's names)
TOOL_CALL_FORMATS: Registry[Any] = Registry("tool-call format", {"hermes": "verl-agent", "gpt-oss": "verl-agent"})
TOOLS: Registry[Any] = Registry("tool")
INTERACTIONS: Registry[Any] = Registry("interaction")
