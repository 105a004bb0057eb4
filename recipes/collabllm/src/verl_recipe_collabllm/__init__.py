"""CollabLLM (Wu et al., ICML 2025, arXiv 2502.00640) as a verl recipe: see README.md."""
