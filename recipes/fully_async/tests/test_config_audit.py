"""The read-or-refused audit of the recipe's two CPU defaults, fully_async and its one-step-off mode, run here
so that the recipe's CI entry runs it in the recipe's own environment (docs/config-audit.md; the root conftest
marks it slow and e2e)."""

import pytest


@pytest.mark.parametrize("entry", ["fully_async", "one_step_off"])
def test_every_key_set_is_read_or_refused(config_audit, entry):
    config_audit(entry)
