"""Weight versions per token through an agent trajectory (servers that resume requests across weight
updates report them; the fully-async recipe's staleness accounting reads them): model tokens carry the
server's versions, environment tokens -1, and the manager's batch gets ``token_versions`` only when every
trajectory has them."""

from verl.agent.agent_loop import AgentLoopOutput, Trajectory
from verl.agent.manager import AgentLoopManager
from verl.agent.server import ScriptedLLMServer, TokenOutput


def test_trajectory_versions_follow_model_and_environment_tokens():
    traj = Trajectory([1, 2])
    traj.add_model(TokenOutput([5, 6, 7], [-0.1] * 3, "stop", versions=[3, 3, 4]))
    traj.add_env([8, 9])
    traj.add_model(TokenOutput([10], [-0.2], "stop", versions=[4]))
    assert traj.response_versions == [3, 3, 4, -1, -1, 4]
    traj.add_model(TokenOutput([11], [-0.3], "length"))  # a server without versions: none for the whole
    assert traj.response_versions is None


def test_manager_batch_carries_token_versions_only_when_every_loop_reports_them(
    rollout_config, tokenizer, stop_ids
):
    manager = AgentLoopManager(rollout_config(), ScriptedLLMServer(["1"], stop_ids, tokenizer), tokenizer)

    def out(versions):
        return AgentLoopOutput([1], [5, 6, 7], [1, 0, 1], [-0.1, 0.0, -0.2], 2, response_versions=versions)

    batch = manager.to_dataproto([out([2, -1, 3]), out([0, -1, 0])])
    tv = batch.batch["token_versions"]
    assert tv[0, :3].tolist() == [2, -1, 3] and tv[1, :3].tolist() == [0, -1, 0]
    assert (tv[:, 3:] == -1).all()  # padding
    assert "token_versions" not in manager.to_dataproto([out([2, -1, 3]), out(None)]).batch.keys()
