"""The step as a pipeline: editing by name, timing, ``when``, early ends, overlapping stages and their joins;
and the trainer's default pipeline for each config."""

import threading

import numpy as np
import pytest
import torch
from verl.protocol import DataProto
from verl.trainer.config import load_config
from verl.trainer.ppo.pipeline import Pipeline, Stage


def _batch(rows: int = 2) -> DataProto:
    return DataProto.from_dict(tensors={"x": torch.arange(rows)}, non_tensors={"uid": np.arange(rows)})


def _tag(name: str, log: list):
    def run(batch, metrics):
        log.append(name)
        metrics[f"seen/{name}"] = 1.0
        return batch

    return run


def test_stages_run_in_order_timed_by_name_and_edited_by_name():
    log: list = []
    p = Pipeline([Stage(n, _tag(n, log)) for n in ("gen", "reward", "adv")])
    p.insert_before("adv", Stage("prm", _tag("prm", log)))
    p.insert_after("gen", Stage("baseline", _tag("baseline", log)))
    p.replace("reward", _tag("rule_reward", log))

    def around(inner):
        def run(batch, metrics):
            log.append("before")
            out = inner(batch, metrics)
            log.append("after")
            return out

        return run

    p.wrap("adv", around)
    timing: dict = {}
    metrics: dict = {}
    assert p.run(_batch(), metrics, timing) is not None
    assert log == ["gen", "baseline", "rule_reward", "prm", "before", "adv", "after"]
    assert p.names == ["gen", "baseline", "reward", "prm", "adv"]
    assert set(timing) == {"gen", "baseline", "reward", "prm", "adv"}
    assert metrics["seen/rule_reward"] == 1.0
    p.remove("baseline")
    assert p.names == ["gen", "reward", "prm", "adv"] and "baseline" not in p
    assert p.starting_at("prm").names == ["prm", "adv"]


def test_unknown_and_duplicate_names_are_errors_that_list_the_stages():
    p = Pipeline([Stage("gen", _tag("gen", [])), Stage("adv", _tag("adv", []))])
    with pytest.raises(KeyError, match="no stage 'filter' in the pipeline; stages: gen, adv"):
        p.replace("filter", _tag("x", []))
    with pytest.raises(ValueError, match=r"unique; \['gen'\]"):
        p.insert_after("adv", Stage("gen", _tag("x", [])))
    with pytest.raises(ValueError, match="joined before 'gen', which is not a later stage"):
        Pipeline([Stage("gen", _tag("gen", [])), Stage("reward", _tag("r", []), joined_before="gen")])
    with pytest.raises(TypeError, match="run must be callable"):
        Pipeline([Stage("gen", None)])


def test_a_stage_returning_none_ends_the_step_and_when_skips_untimed():
    log: list = []
    p = Pipeline([
        Stage("gen", _tag("gen", log)),
        Stage("testing", _tag("testing", log), when=lambda: False),
        Stage("filter", lambda b, m: None),
        Stage("adv", _tag("adv", log)),
    ])  # fmt: skip
    timing: dict = {}
    assert p.run(_batch(), {}, timing) is None
    assert log == ["gen"] and set(timing) == {"gen", "filter"}


def test_an_overlapping_stage_runs_in_a_thread_while_later_stages_run_and_joins_its_keys():
    passes_started = threading.Event()
    seen = {}

    def reward(batch, metrics):
        seen["thread"] = threading.current_thread().name
        # finishes only once the next stage has started on the main thread: proves the overlap
        assert passes_started.wait(timeout=30)
        batch.batch["scores"] = batch.batch["x"] * 10
        batch.non_tensor_batch["acc"] = np.array([1, 0])
        batch.meta_info["reward_keys"] = ["acc"]
        metrics["reward/mean"] = 0.5
        return batch

    def log_prob(batch, metrics):
        passes_started.set()
        assert "scores" not in batch.batch  # not joined yet
        batch.batch["old_log_probs"] = batch.batch["x"] * 0.0
        return batch

    def adv(batch, metrics):
        seen["adv_keys"] = sorted(batch.batch.keys())
        return batch

    p = Pipeline([Stage("reward", reward, joined_before="adv"), Stage("old_log_prob", log_prob), Stage("adv", adv)])
    timing: dict = {}
    metrics: dict = {}
    out = p.run(_batch(), metrics, timing)
    assert seen["thread"].startswith("reward") and seen["adv_keys"] == ["old_log_probs", "scores", "x"]
    assert out.batch["scores"].tolist() == [0, 10] and out.non_tensor_batch["acc"].tolist() == [1, 0]
    assert out.meta_info["reward_keys"] == ["acc"] and metrics["reward/mean"] == 0.5
    assert {"reward", "reward_wait", "old_log_prob", "adv"} == set(timing)


def test_an_overlapping_stage_that_drops_rows_or_raises_fails_the_step_at_the_join():
    def drop(batch, metrics):
        return batch.select_idxs(torch.tensor([0]))

    p = Pipeline([Stage("filter", drop, joined_before="adv"), Stage("adv", lambda b, m: b)])
    with pytest.raises(ValueError, match="'filter' must return the batch it was given with keys added, not 1 rows"):
        p.run(_batch(), {}, {})

    def boom(batch, metrics):
        raise RuntimeError("scorer crashed on row 3")

    p = Pipeline([Stage("reward", boom, joined_before="adv"), Stage("adv", lambda b, m: b)])
    with pytest.raises(RuntimeError, match="scorer crashed on row 3"):
        p.run(_batch(), {}, {})


def _trainer(*overrides):
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    t = RayPPOTrainer.__new__(RayPPOTrainer)  # only what build_pipeline reads
    t.config = load_config(list(overrides))
    return t


def test_the_default_pipeline_per_config():
    tail = ["adv", "update_critic", "update_actor", "dump_rollout", "testing", "save_checkpoint"]
    assert _trainer().pipeline.names == ["gen", "reward", "filter", "balance", "old_log_prob", "ref", "values", *tail]
    remax = _trainer("algorithm.adv_estimator=remax").pipeline
    assert remax.names[:3] == ["gen", "greedy_baseline", "reward"]
    overlap = _trainer("reward.launch_reward_fn_async=true").pipeline
    # scoring overlaps the log-prob and value passes; the filter needs the scores, so it follows the join
    assert overlap.names == ["gen", "balance", "reward", "old_log_prob", "ref", "values", "filter", *tail]
    assert overlap["reward"].joined_before == "filter"


def test_overriding_a_removed_private_hook_is_an_error_naming_the_public_one():
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    with pytest.raises(TypeError, match=r"_stage_filter \(override stage_filter\), _validate \(override validate\)"):

        class Old(RayPPOTrainer):
            def _stage_filter(self, batch, metrics):
                return batch

            def _validate(self):
                return {}
