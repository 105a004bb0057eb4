"""The SGLang rollout's CPU-testable parts: config translation, request building, output assembly and the
weight-sync / memory bookkeeping, against a recording stand-in for ``sglang.Engine`` (SGLang has no
CPU path here; the real engine has not run)."""

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl.trainer.config import load_config
from verl.workers.engine.testing import chat_prompt_batch
from verl.workers.rollout import SGLangRollout, build_rollout
from verl.workers.rollout.sglang_rollout import sglang_rollout as sgl
from verl.workers.rollout.weight_sync import sync_weights


def cfg(model_dir, *overrides):
    return load_config([f"actor_rollout_ref.model.path={model_dir}", "actor_rollout_ref.rollout.name=sglang",
                        "data.max_prompt_length=32", "data.max_response_length=4", *overrides]).actor_rollout_ref


class RecordingEngine:
    """Records every call; ``generate`` answers each prompt with its last token repeated, then EOS."""

    def __init__(self, eos):
        self.calls, self.eos = [], eos

    def generate(self, input_ids, sampling_params, return_logprob):
        self.calls.append(("generate", input_ids, sampling_params, return_logprob))
        outs = []
        for i, p in enumerate(input_ids):
            ids = [p[-1]] * i + [self.eos]
            outs.append({"output_ids": ids, "meta_info": {
                "finish_reason": {"type": "stop"},
                "output_token_logprobs": [(-0.5 * (k + 1), t, None) for k, t in enumerate(ids)]}})
        return outs

    def update_weights_from_tensor(self, named_tensors, flush_cache):
        self.calls.append(("update", [n for n, _ in named_tensors], flush_cache))

    def flush_cache(self):
        self.calls.append(("flush",))

    def release_memory_occupation(self, tags):
        self.calls.append(("release", tags))

    def resume_memory_occupation(self, tags):
        self.calls.append(("resume", tags))


class Recorded(SGLangRollout):
    def _make_engine(self, kwargs):
        self.made_with = kwargs
        return RecordingEngine(self.eos_token_ids[0])


@pytest.fixture
def setup(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)


def test_config_translates_to_server_args_and_unhonourable_settings_are_refused(tiny_model_dir):
    c = cfg(tiny_model_dir, "actor_rollout_ref.rollout.enable_chunked_prefill=false",
            "actor_rollout_ref.rollout.enable_prefix_caching=false", "+actor_rollout_ref.rollout.engine_kwargs.sglang.log_level=error")
    kw = sgl.engine_kwargs(c.rollout, "/m", trust_remote_code=False, seed=43)
    assert kw["chunked_prefill_size"] == -1 and kw["disable_radix_cache"] and kw["context_length"] == 36
    assert (kw["tp_size"], kw["mem_fraction_static"], kw["random_seed"], kw["log_level"]) == (1, 0.5, 43, "error")
    assert kw["disable_cuda_graph"] and kw["enable_memory_saver"] and kw["skip_tokenizer_init"]
    for bad, needle in (("actor_rollout_ref.rollout.tensor_model_parallel_size=2", "tensor_model_parallel_size=2"),
                        ("+actor_rollout_ref.rollout.engine_kwargs.sglang.tp_size=2", "engine_kwargs.sglang.tp_size"),
                        ("actor_rollout_ref.rollout.mode=async", "rollout.mode='async'")):
        with pytest.raises(ValueError, match="sglang rollout config") as e:
            sgl.check_config(cfg(tiny_model_dir, bad).rollout)
        assert needle in str(e.value)


def test_cpu_actor_is_refused_with_what_to_use(tiny_model_dir, setup):
    module, tok = setup
    c = cfg(tiny_model_dir)
    with pytest.raises(ValueError, match="needs a CUDA device.*rollout.name=vllm"):
        build_rollout("sglang", module=module, config=c.rollout, tokenizer=tok, model_config=c.model)


def test_requests_outputs_and_weight_sync_bookkeeping(tiny_model_dir, setup):
    module, tok = setup
    c = cfg(tiny_model_dir, "actor_rollout_ref.rollout.calculate_log_probs=true")
    r = Recorded(module, c.rollout, tok, model_config=c.model)
    eng = r.engine
    assert eng.calls == [("release", ["kv_cache", "weights"])]  # training runs first
    stats = sync_weights(module.state_dict().items(), r, bucket_size_bytes=40_000)
    updates = [x for x in eng.calls if x[0] == "update"]
    assert stats.num_buckets > 1 and len(updates) >= 2
    assert all(flush is False for _, _, flush in updates)
    assert sorted(n for _, names, _ in updates for n in names) == sorted(module.state_dict())
    assert eng.calls[1] == ("resume", ["weights"]) and eng.calls[-1] == ("flush",)

    eng.calls.clear()
    prompts = chat_prompt_batch(tok, ["1+1=", "hello"], meta={"temperature": 1.0})
    r.resume()
    gen = r.generate_sequences(prompts)
    r.release()
    assert eng.calls[0] == ("resume", ["kv_cache"])
    kind, input_ids, sp, want_lp = eng.calls[1]
    am = prompts.batch["attention_mask"]
    assert input_ids == [prompts.batch["input_ids"][i][am[i] == 1].tolist() for i in range(2)]
    assert sp["max_new_tokens"] == 4 and sp["stop_token_ids"] == r.eos_token_ids and sp["no_stop_trim"] and want_lp
    assert eng.calls[2] == ("release", ["kv_cache", "weights"])
    eos = r.eos_token_ids[0]
    assert gen.batch["responses"].tolist() == [[eos, r.pad_token_id], [input_ids[1][-1], eos]]
    assert gen.batch["response_mask"].tolist() == [[1, 0], [1, 1]]
    assert gen.batch["rollout_log_probs"].tolist() == [[-0.5, 0.0], [-0.5, -1.0]]


def test_log_probs_must_line_up_with_the_output_ids():
    with pytest.raises(ValueError, match="do not follow output_ids"):
        sgl.row_output({"output_ids": [5, 6], "meta_info": {"finish_reason": {"type": "length"},
                                                            "output_token_logprobs": [(-1.0, 6, None), (-1.0, 5, None)]}}, True)
    greedy = sgl.sampling_params(sgl.SamplingParams(response_length=3, do_sample=False, top_k=5), [1], ignore_eos=False)
    assert (greedy["temperature"], greedy["top_k"], greedy["top_p"]) == (0.0, -1, 1.0)
