"""Rewards for the chaos suite's runs (loaded through ``reward.custom_reward_function.path``).

``compute_score``: a shaped reward that gives a random-init model a signal (1 for the exact answer, else
half the fraction of digit characters), so advantages, gradients and the LR schedule all matter.
The others misbehave on purpose, each in one way a user's scorer can.
"""

import math


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    text = solution_str.strip()
    if text == str(ground_truth):
        return 1.0
    return 0.5 * sum(c.isdigit() for c in text) / len(text) if text else 0.0


def raises(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    raise KeyError("answer")


def returns_nan(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return math.nan


def returns_string(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return "0.5"


def returns_dict_without_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return {"acc": 1.0}
