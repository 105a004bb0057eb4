from importlib.metadata import entry_points


def test_entry_point_registers_everything():
    from verl.registries import AGENT_LOOPS, INTERACTIONS, TOOLS, WORKER_CLASSES

    assert "verl.agent.plugin" in {ep.value for ep in entry_points(group="verl.plugins")}
    assert {"single_turn_agent", "tool_agent", "chat_endpoint_agent"} <= set(AGENT_LOOPS.names())
    assert {"code_interpreter", "search", "calculator"} <= set(TOOLS.names())
    assert "gsm8k" in INTERACTIONS.names()
    assert WORKER_CLASSES.get("agent_actor_rollout_ref").__name__ == "AgentActorRolloutRefWorker"
