"""ReTool (Feng et al. 2025, "ReTool: Reinforcement Learning for Strategic Tool Use in LLMs", arXiv 2504.11536).

uv run --package verl-recipe-retool verl-retool            # CPU default: cold start + DAPO with the tool
uv run --package verl-recipe-retool verl-retool --config recipes/retool/configs/retool_qwen2.5_7b.yaml ...
"""
