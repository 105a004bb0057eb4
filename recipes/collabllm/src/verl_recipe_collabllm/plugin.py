"""The recipe's entry point in the ``verl.plugins`` group: importing it registers the agent loop
``collabllm_agent``, the interaction ``collabllm`` and the reward manager ``collabllm`` (every process,
Ray workers included, loads it on its first registry miss)."""

import verl_recipe_collabllm.agent_loop  # noqa: F401  (AGENT_LOOPS: collabllm_agent)
import verl_recipe_collabllm.interaction  # noqa: F401  (INTERACTIONS: collabllm)
import verl_recipe_collabllm.reward_manager  # noqa: F401  (REWARD_MANAGERS: collabllm)
