"""Model reward models: a discriminative RM worker and a generative judge scorer."""
