"""SPPO (Self-Play Preference Optimization, arXiv 2405.00675) as a verl recipe (see README.md)."""
