"""MkDocs hook: the READMEs that live beside the code (packages, recipes, examples, benchmarks, the vLLM-CPU
environment) and DEVELOPERS.md become pages of the site at the same relative path, with the images and
result tables they link to. They stay where a reader of the repository finds them; the site renders them from there, so
there is one copy of each."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
SOURCES = (
    "packages/*/README.md",
    "recipes/*/README.md",
    "recipes/*/*.png",
    "recipes/*/benchmarks/results/*.png",
    "examples/README.md",
    "examples/*/README.md",
    "envs/vllm-cpu/README.md",
    "benchmarks/README.md",
    "benchmarks/results/*.md",
    "benchmarks/results/*/*.md",
    "benchmarks/grpo_step/README.md",
    "benchmarks/grpo_step/results/*.md",
    "benchmarks/grpo_step/results/*.png",
    "DEVELOPERS.md",
)


def on_files(files: Files, config) -> Files:
    for pattern in SOURCES:
        for path in sorted(ROOT.glob(pattern)):
            uri = path.relative_to(ROOT).as_posix()
            if files.get_file_from_path(uri) is None:
                files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files
