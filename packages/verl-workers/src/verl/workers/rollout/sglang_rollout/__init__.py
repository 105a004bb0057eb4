"""``rollout.name=sglang`` (extra ``verl-workers[sglang]``, GPU only; has not run: SGLang has no CPU
path on these machines). Importing this package registers the engine without importing SGLang."""

from verl.workers.rollout.sglang_rollout.sglang_rollout import SGLangRollout

__all__ = ["SGLangRollout"]
