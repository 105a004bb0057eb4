"""Small built-in agent tasks (used by the end-to-end test and as templates)."""
