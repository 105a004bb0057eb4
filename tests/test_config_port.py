"""The port tool: shell-script parsing, key-by-key classification, and the committed sample report."""


import pytest

from .by_path import ROOT, load_module

port = load_module(ROOT / "scripts" / "config_port.py", "config_port")
commands_from_script, main, render_markdown, reports_for = port.commands_from_script, port.main, port.render_markdown, port.reports_for

SCRIPT = """#!/usr/bin/env bash
set -xeuo pipefail
max_prompt_length=$((1024 * 2))
max_response_length=$((1024 * 4))
NNODES=${NNODES:-1}
offload=false # it's a comment with an apostrophe
ENGINE=${1:-vllm}
CKPTS=${CKPTS_DIR:-"${HOME}/ckpts/x"}
train_files="['/d/a.parquet', '/d/b.parquet']"
# python3 -m verl.trainer.main_ppo data.train_files=commented_out
python3 -m verl.trainer.main_ppo --config-path=config \\
    --config-name='ppo_megatron_trainer.yaml'\\
    data.train_files="$train_files" \\
    data.max_prompt_length=${max_prompt_length} \\
    actor_rollout_ref.rollout.max_num_batched_tokens=$((max_prompt_length + max_response_length)) \\
    actor_rollout_ref.actor.fsdp_config.param_offload=${offload} \\
    actor_rollout_ref.rollout.name=$ENGINE \\
    trainer.nnodes="${NNODES}" \\
    trainer.default_local_dir="${CKPTS}" \\
    data.return_raw_chat=$UNSET_VAR $@
"""


def test_script_variables_arithmetic_and_quotes_are_expanded_as_bash_does():
    (argv,) = commands_from_script(SCRIPT)
    assert argv == [
        "--config-path=config",
        "--config-name=ppo_megatron_trainer.yaml",
        "data.train_files=['/d/a.parquet', '/d/b.parquet']",
        "data.max_prompt_length=2048",
        "actor_rollout_ref.rollout.max_num_batched_tokens=6144",
        "actor_rollout_ref.actor.fsdp_config.param_offload=false",
        "actor_rollout_ref.rollout.name=vllm",
        "trainer.nnodes=1",
        "trainer.default_local_dir=/home/user/ckpts/x",
        "data.return_raw_chat=",
    ]


def test_each_argument_is_classified_and_the_verdict_names_the_reason():
    argv = [
        "data.train_files=a.parquet",
        "actor_rollout_ref.model.path=m",
        "trainer.n_gpus_per_node=8",
        "reward_model.reward_manager=dapo",  # alias
        "actor_rollout_ref.rollout.cudagraph_capture_sizes=null",  # upstream key at its default
        "trainer.use_v1=False",  # upstream key, refused
        "actor_rollout_ref.actor.kl_loss.type=low_var_kl",  # not upstream 0.9.1's either
    ]
    (rep,) = reports_for(argv)
    status = {k.arg.split("=")[0]: k.status for k in rep.keys}
    assert status == {
        "data.train_files": "supported",
        "actor_rollout_ref.model.path": "supported",
        "trainer.n_gpus_per_node": "supported",
        "reward_model.reward_manager": "alias",
        "actor_rollout_ref.rollout.cudagraph_capture_sizes": "default",
        "trainer.use_v1": "refused",
        "actor_rollout_ref.actor.kl_loss.type": "stale",
    }
    assert rep.stale == ["actor_rollout_ref.actor.kl_loss.type=low_var_kl"] and not rep.loads
    # the stale key's detail names 0.9.1's spelling
    assert "0.9.1: actor_rollout_ref.actor.use_kl_loss / kl_loss_coef / kl_loss_type" in rep.keys[-1].detail
    (rep,) = reports_for(argv[:5])
    assert rep.loads and not rep.stale


def test_cli_exit_status(capsys, tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo data.train_files=x actor_rollout_ref.model.path=m "
        "trainer.n_gpus_per_node=1 data.train_batch_size=8 actor_rollout_ref.actor.ppo_mini_batch_size=8 "
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=7\n"
    )
    assert main(["--", str(script)]) == 1
    out = capsys.readouterr().out
    assert f"== {script}: REFUSED" in out and "ppo_micro_batch_size_per_gpu=7" in out


@pytest.mark.slow
def test_committed_sample_report_is_current():
    sample = ROOT / "docs" / "upstream-examples"
    reps = reports_for([str(sample / "commands.json")])
    assert render_markdown(reps) == (sample / "report.md").read_text(), (
        "regenerate: uv run python scripts/config_port.py --markdown -- "
        "docs/upstream-examples/commands.json > docs/upstream-examples/report.md"
    )


def test_port_tool_reports_hydra_arguments():
    required = ["data.train_files=x", "actor_rollout_ref.model.path=m"]
    reps = {k.arg: k for k in port.classify([*required, "hydra.run.dir=/tmp/r", "hydra.job.chdir=true"])}
    assert reps["hydra.run.dir=/tmp/r"].status == "supported"
    assert reps["hydra.job.chdir=true"].status == "refused"


def test_generated_config_files_are_current(capsys):
    assert load_module(ROOT / "scripts" / "config_reference.py", "config_reference").main(["--check"]) == 0, capsys.readouterr().err
