"""Vision-language GRPO (count the shapes) as a verl recipe (see README.md)."""
