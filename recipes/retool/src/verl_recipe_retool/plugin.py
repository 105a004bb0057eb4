"""Imported by every process on its first registry miss (entry point ``verl.plugins``): the task's scorer."""

import verl_recipe_retool.task  # noqa: F401  (registers the retool_arith scorer)
