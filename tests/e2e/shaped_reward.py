"""A shaped reward for the built-in task, so a random-init tiny model gets a learning signal in 3 steps:
1 for the exact answer (as the ``arithmetic`` scorer), else half the fraction of digit characters."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    text = solution_str.strip()
    if text == str(ground_truth):
        return 1.0
    return 0.5 * sum(c.isdigit() for c in text) / len(text) if text else 0.0
