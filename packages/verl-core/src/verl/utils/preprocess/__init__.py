"""Converters from public dataset files (given locally; nothing is downloaded) to the RL row contract.

python -m verl.utils.preprocess.gsm8k --input gsm8k/test.jsonl --output_dir ~/data/gsm8k
python -m verl.utils.preprocess.math_dataset --input MATH/test --output_dir ~/data/math
"""
