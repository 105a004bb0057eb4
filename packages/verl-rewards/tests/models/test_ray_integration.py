"""verl-rewards inside Ray: the RM worker as a worker group, and the time-limited math scorer from a
thread of a Ray actor (where signal-based timeouts cannot work)."""

import numpy as np
import pytest
import torch
from verl import DataProto

pytestmark = pytest.mark.slow


def test_rm_worker_group_matches_direct_scores(ray_cluster, tmp_path):
    tiny = pytest.importorskip("verl.workers.tiny")
    import transformers
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    tok = tiny.build_char_tokenizer(tmp_path)
    config = tiny.tiny_qwen2_config("xs", vocab_size=len(tok))
    config.num_labels = 1
    torch.manual_seed(3)
    model = transformers.Qwen2ForSequenceClassification(config).eval()
    model.save_pretrained(tmp_path)

    texts = ["1+1=2", "abc", "hello world", "7"]
    seqs = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    width = max(map(len, seqs))
    resp = torch.full((4, width), tok.pad_token_id)
    mask = torch.zeros(4, width, dtype=torch.long)
    for i, s in enumerate(seqs):
        resp[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    data = DataProto.from_dict(
        tensors={"responses": resp, "input_ids": resp, "attention_mask": mask},
        non_tensors={"uid": np.array(list("abcd"), dtype=object)},
    )
    pool = RayResourcePool(
        process_on_nodes=[2], use_gpu=False, max_colocate_count=1, num_cpus_per_worker=0.25
    )
    from verl.rewards.models.rm_worker import RewardModelWorker

    wg = RayWorkerGroup(
        pool, RayClassWithInitArgs(RewardModelWorker, config={"model": {"path": str(tmp_path)}})
    )
    wg.init_model()
    rm = wg.compute_rm_score(data).batch["rm_scores"]
    for i, s in enumerate(seqs):
        with torch.no_grad():
            want = model(input_ids=torch.tensor([s])).logits[0, 0].item()
        assert rm[i, len(s) - 1].item() == pytest.approx(want, abs=1e-5)


def test_math_time_limit_from_a_thread_inside_a_ray_actor(ray_cluster):
    ray = ray_cluster

    @ray.remote(num_cpus=0.25)
    class Scorer:
        def score(self):
            from concurrent.futures import ThreadPoolExecutor

            from verl.rewards import default_compute_score

            rows = [(r"\boxed{\frac{2}{4}}", "0.5"), (r"\boxed{9^{9^{9^{9}}}}", "1")]
            with ThreadPoolExecutor(2) as ex:
                return list(
                    ex.map(lambda r: default_compute_score("lighteval/MATH", r[0], r[1], timeout=3), rows)
                )

    actor = Scorer.remote()
    assert ray.get(actor.score.remote(), timeout=300) == [
        {"score": 1.0, "verdict": "passed"},
        {"score": 0.0, "verdict": "timeout"},
    ]
