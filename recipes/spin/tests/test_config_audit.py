"""The read-or-refused audit of the recipe's CPU default (scripts/config_audit.py; docs/config-audit.md):
every key set to a non-default value is read by the run or refused at validation. It runs here so that
the recipe's CI entry runs it in the recipe's own environment."""

import pytest


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(1800)
def test_every_key_set_is_read_or_refused(config_audit):
    config_audit("spin")
