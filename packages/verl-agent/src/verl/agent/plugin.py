"""verl-agent's entry point in the ``verl.plugins`` group: importing it registers the agent loops
(``single_turn_agent``, ``tool_agent``), the tool-call formats (``hermes``, ``gpt-oss``), the built-in tools
(``code_interpreter``, ``search``) and interactions (``gsm8k``)."""

import verl.agent.agent_loop  # noqa: F401  (single_turn_agent)
import verl.agent.chat_agent  # noqa: F401  (chat_endpoint_agent)
import verl.agent.examples.tool_arithmetic  # noqa: F401  (calculator)
import verl.agent.interactions.gsm8k  # noqa: F401  (gsm8k)
import verl.agent.tool_agent  # noqa: F401  (tool_agent)
import verl.agent.tools.code_interpreter  # noqa: F401  (code_interpreter)
import verl.agent.tools.formats  # noqa: F401  (hermes, gpt-oss)
import verl.agent.tools.search  # noqa: F401  (search)

# The agent-enabled hybrid worker, for main_ppo to pick when rollout.multi_turn.enable is set.
from verl.agent.worker import AgentActorRolloutRefWorker  # noqa: E402
from verl.registries import WORKER_CLASSES  # noqa: E402

WORKER_CLASSES.register("agent_actor_rollout_ref", AgentActorRolloutRefWorker)
