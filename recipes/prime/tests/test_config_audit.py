"""The read-or-refused audit of this recipe's CPU default (docs/config-audit.md), run here so that the
recipe's CI entry runs it in the recipe's own environment; the root conftest marks it slow and e2e."""


def test_every_key_set_is_read_or_refused(config_audit):
    config_audit("prime")
