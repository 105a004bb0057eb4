"""SPIN (Self-Play Fine-Tuning, arXiv 2401.01335) as a verl recipe (see README.md)."""
