"""``generate_sequences`` with the reward loop's chunks: an engine that gives its memory back after
generating (vLLM/SGLang sleep mode) stays awake while ``meta_info["more_chunks"]`` says another chunk of
the round follows, and releases after the last one."""

from types import SimpleNamespace

import pytest
from verl import DataProto
from verl.workers import fsdp_workers, megatron_workers


class RecordingRollout:
    def __init__(self):
        self.calls = []

    def resume(self):
        self.calls.append("resume")

    def release(self):
        self.calls.append("release")

    def generate_sequences(self, prompts):
        self.calls.append("gen")
        return prompts


@pytest.mark.parametrize("module", [fsdp_workers, megatron_workers], ids=["fsdp", "megatron"])
def test_the_engine_is_released_after_the_last_chunk_only(module):
    rollout = RecordingRollout()
    worker = SimpleNamespace(_is_rollout=True, _sync_rollout_weights=lambda: None, rollout=rollout, role="actor_rollout")
    for more in (True, True, False):
        module.ActorRolloutRefWorker.generate_sequences(worker, DataProto(meta_info={"more_chunks": more}))
    assert rollout.calls == ["resume", "gen", "resume", "gen", "resume", "gen", "release"]
    rollout.calls.clear()
    module.ActorRolloutRefWorker.generate_sequences(worker, DataProto())  # one pass: released at once
    assert rollout.calls == ["resume", "gen", "release"]
