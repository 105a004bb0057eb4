"""The weight-sync seam inside the worker: a rollout engine with its own copy of the weights
(as vLLM/SGLang will be) receives the actor's weights in buckets before generating."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl.registries import ROLLOUT_ENGINES
from verl.workers.fsdp_workers import ActorRolloutRefWorker
from verl.workers.rollout.hf_rollout import HFRollout


class OwnCopyRollout(HFRollout):
    """HF sampling on a separately initialised model that only changes through update_weights."""

    shares_trainer_weights = False
    received: list[list[str]] = []

    def __init__(self, module, config, tokenizer=None, **kwargs):
        torch.manual_seed(123)  # deliberately different from the actor's weights
        super().__init__(AutoModelForCausalLM.from_config(module.config), config, tokenizer)

    def update_weights(self, weights):
        weights = dict(weights)
        OwnCopyRollout.received.append(sorted(weights))
        missing, unexpected = self.module.load_state_dict(weights, strict=False)
        assert not unexpected, unexpected
        assert all(k == "lm_head.weight" for k in missing), missing  # tied to the embedding


def test_own_weight_engine_is_synced_before_each_generation_after_an_update(
    make_cfg, prompts_for, tiny_model_dir
):
    ROLLOUT_ENGINES.register("test_own_copy", OwnCopyRollout)
    try:
        cfg = make_cfg(
            tiny_model_dir,
            "actor_rollout_ref.rollout.name=test_own_copy",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "+actor_rollout_ref.rollout.engine_kwargs.update_weights_bucket_megabytes=1",
        )
        tok = AutoTokenizer.from_pretrained(tiny_model_dir)
        w = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor_rollout")
        w.init_model()
        assert w.rollout.module is not w.actor_module
        prompts = prompts_for(tok, ["1+1=", "22+3="], n=2, meta={"do_sample": False, "temperature": 1.0})

        def check_rollout_matches_actor():
            gen = w.generate_sequences(prompts)
            gen.meta_info["temperature"] = 1.0
            lp = w.compute_log_prob(gen).batch["old_log_probs"]
            m = gen.batch["response_mask"].bool()
            torch.testing.assert_close(gen.batch["rollout_log_probs"][m], lp[m], atol=1e-4, rtol=1e-4)
            return gen

        gen = check_rollout_matches_actor()  # first generation synced the initial weights
        assert len(OwnCopyRollout.received) == 1
        check_rollout_matches_actor()  # no update in between: no second transfer
        assert len(OwnCopyRollout.received) == 1

        batch = gen.union(w.compute_log_prob(gen))
        batch.batch["advantages"] = (
            torch.tensor([1.0, -1.0, 1.0, -1.0]).unsqueeze(1) * batch.batch["response_mask"]
        )
        w.update_actor(batch)
        check_rollout_matches_actor()  # the update reached the engine's copy
        assert len(OwnCopyRollout.received) == 2
        assert OwnCopyRollout.received[1] == OwnCopyRollout.received[0]
    finally:
        ROLLOUT_ENGINES.unregister("test_own_copy")
