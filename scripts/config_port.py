"""Port an upstream verl command line: key by key, what is supported, aliased or refused here, and why.

    uv run python scripts/config_port.py -- data.train_files=... actor_rollout_ref.rollout.name=vllm ...
    uv run python scripts/config_port.py -- examples/grpo_trainer/run_qwen2-7b.sh [more.sh ...]
    uv run python scripts/config_port.py --markdown [--env NAME=VALUE] -- a.sh b.sh > report.md
    uv run python scripts/config_port.py --markdown -- docs/upstream-examples/commands.json   # the sample

For a ``.sh`` file the ``python3 -m verl.trainer.main_ppo ...`` command is taken out of the script (line
continuations joined, the script's ``NAME=value`` / ``${NAME:-default}`` variables expanded, ``$@`` dropped).
Each override is classified (supported, alias of our key, accepted at upstream's default, refused with the
reason, unknown), then the whole command is loaded and validated as on a CUDA machine (this machine's lack
of a GPU is not the command's problem; engines that are not installed here are, and are named with their
install line). Exit status: 0 when every command loads, else 1.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

from verl.trainer.config import (
    ConfigError,
    PPOTrainerConfig,
    load_config,
    schema_fields,
    upstream,
    validate_config,
)
from verl.trainer.config.hydra_run import is_hydra_arg, split_hydra
from verl.trainer.config.loader import _is_ours, parse_settings

_ENTRY = re.compile(r"(?:python3?|uv run(?: python3?)?)\s+-m\s+verl\.trainer\.main_ppo\b")
_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*|\d)(?::?-([^}$]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
INSTALL_MARK = "which is not installed"

#: Keys of upstream's older example scripts that 0.9.1 no longer has: (prefix, 0.9.1's spelling). Older, not
#: newer, spellings; the evidence (upstream volcengine/verl, read with the project's code search) is
#: STALE_EVIDENCE, printed at the head of the markdown report.
OLDER_SPELLINGS: tuple[tuple[str, str], ...] = (
    ("actor_rollout_ref.actor.kl_loss.", "actor_rollout_ref.actor.use_kl_loss / kl_loss_coef / kl_loss_type"),
    ("algorithm.in_reward_kl.", "algorithm.use_kl_in_reward / kl_penalty / kl_ctrl.*"),
    ("actor_rollout_ref.actor.use_gpg_loss", "actor_rollout_ref.actor.policy_loss.loss_mode=gpg"),
    ("trainer.use_legacy_worker_impl", "none: 0.9.1's trainer has trainer.use_v1 instead"),
    ("reward_model.", "reward.reward_model.*"),
)
STALE_EVIDENCE = """\
Why "stale" means older, not newer: the excluded scripts were taken from upstream commits that predate
0.9.1, and every key they need is a spelling 0.9.1 replaced.

- `actor.kl_loss.{type,coef}`, `algorithm.in_reward_kl.{type,coef,kl_ctrl.*}`: upstream's
  `verl/trainer/config/ppo_trainer.yaml` at commit 74061786 (where 7 of the scripts come from) defines them
  next to keys 0.9.1 has since dropped (`ppo_micro_batch_size: null # will be deprecated`,
  `data.val_batch_size # DEPRECATED`, `rollout.use_fire_sampling`, a top-level `reward_model.reward_manager`).
  0.9.1's config (`_generated_ppo_trainer.yaml`) spells them `actor.use_kl_loss / kl_loss_coef /
  kl_loss_type` and `algorithm.use_kl_in_reward / kl_penalty / kl_ctrl.*`.
- `actor.use_gpg_loss`: how upstream's `examples/gpg_trainer/gpg.md` at commit 5bdba32 turns GPG on;
  upstream's later GPG doc and 0.9.1's `PolicyLossConfig` use `actor.policy_loss.loss_mode=gpg`, and a
  code search finds no upstream code that reads `use_gpg_loss`.
- `trainer.use_legacy_worker_impl`: read by upstream's `main_ppo.py` before the v1 trainer
  (`config.trainer.get("use_legacy_worker_impl", "auto")`, beside the top-level `reward_model.*` section
  0.9.1 moved under `reward.`); the later `main_ppo.py` switches on `trainer.use_v1` and warns that the
  legacy trainer is removed in v0.9.0; 0.9.1's config has `trainer.use_v1`, not this key.
- `+trainer.val_before_train=False`: `+` adds a key that did not exist then; 0.9.1 has the key, so Hydra
  refuses the `+` as well.

So these scripts fail on upstream 0.9.1 itself, and are counted apart rather than accepted as aliases.
"""


@dataclass
class KeyReport:
    arg: str
    status: str  # supported | alias | default | refused | unknown | stale | form
    detail: str = ""


@dataclass
class CommandReport:
    source: str
    argv: list[str]
    keys: list[KeyReport] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def loads(self) -> bool:
        """The config is accepted; engines not installed here are reported, not counted."""
        return all(INSTALL_MARK in p for p in self.problems)

    @property
    def stale(self) -> list[str]:
        """Arguments upstream verl 0.9.1 refuses as well (the script predates it)."""
        return [k.arg for k in self.keys if k.status == "stale"]

    @property
    def needs(self) -> list[str]:
        return [p for p in self.problems if INSTALL_MARK in p]


# ------------------------------------------------------------------------------------------ scripts
def commands_from_script(text: str, env: dict[str, str] | None = None) -> list[list[str]]:
    """Every ``main_ppo`` command of a shell script, as argv lists (after ``-m verl.trainer.main_ppo``).

    ``env``: values of variables the script takes from its environment (``SLURM_JOB_NUM_NODES``); unset
    ones expand to "" as in bash, except ``HOME`` (``/home/user``: Hydra's grammar refuses a value starting with ``~``)."""
    text = re.sub(r"\\\r?\n", " ", text)
    env = {"HOME": "/home/user", **(env or {})}
    out = []
    for line in text.splitlines():
        code = _strip_comment(line)
        m = _ENTRY.search(code)
        if m:
            rest = _expand(code[m.end() :], env)
            argv = [a for a in shlex.split(rest, comments=True) if a not in ("$@", "$*")]
            out.append([a for a in argv if not a.startswith(("2>", ">", "|", "&"))])
            continue
        a = _ASSIGN.match(code)
        if a and not code.lstrip().startswith(("if ", "for ", "while ")):
            value = _expand(a.group(2).strip(), env)
            try:
                parts = shlex.split(value, comments=True)
                value = parts[0] if len(parts) == 1 else value
            except ValueError:  # an apostrophe in a trailing comment
                value = value.split(" #", 1)[0].strip().strip("'\"")
            env[a.group(1)] = value
    return out


def _strip_comment(line: str) -> str:
    return "" if line.lstrip().startswith("#") else line


def _expand(text: str, env: dict[str, str]) -> str:
    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        if name in env:
            return env[name]
        return m.group(2) if m.group(2) is not None else ""

    text = re.sub(
        r"\$\(basename ([^)]*)\)", lambda m: _expand(m.group(1), env).rstrip("/").rsplit("/", 1)[-1], text
    )
    while True:  # innermost first: ${A:-"${B}/x"}
        expanded = _arith(_VAR.sub(sub, text), env)
        if expanded == text:
            return text
        text = expanded


def _arith(text: str, env: dict[str, str] | None = None) -> str:
    """Evaluate bash arithmetic ``$(( ... ))`` whose names are the script's integer variables."""
    out, i = [], 0
    while (start := text.find("$((", i)) >= 0:
        depth, j = 0, start + 1
        while j < len(text):
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            if depth == 0:
                break
            j += 1
        inner = text[start + 3 : j - 1]
        names = re.sub(r"\$?([A-Za-z_]\w*)", lambda m: (env or {}).get(m.group(1), m.group(0)), inner)
        if re.fullmatch(r"[\d\s+\-*/()]+", names):  # only digits and + - * / ( ) are evaluated
            out += [text[i:start], str(int(eval(names.replace("/", "//"))))]
        else:
            out.append(text[i : j + 1])
        i = j + 1
    return "".join(out) + text[i:]


# ----------------------------------------------------------------------------------------- classify
def classify(argv: list[str]) -> list[KeyReport]:
    rest, _, hydra_problems = split_hydra(argv)
    out = []
    for arg in (a for a in argv if is_hydra_arg(a)):
        why = [p for p in hydra_problems if p.startswith(arg + ":")]
        out.append(KeyReport(arg, "refused", why[0]) if why else KeyReport(arg, "supported", "Hydra's run directory"))
    settings, problems, base = parse_settings(rest)
    out += [KeyReport(p, "form", p) for p in problems]
    fields = schema_fields(PPOTrainerConfig)
    for s in (s for s in settings if s.where == "on the command line"):
        key, arg = s.key, s.text
        if s.op == "+" and upstream.is_upstream_key(key):
            out.append(KeyReport(arg, "stale", "upstream 0.9.1 has this key: Hydra refuses '+' on it too"))
        elif upstream.alias_of(key):
            out.append(KeyReport(arg, "alias", f"upstream's spelling of {upstream.alias_of(key)}"))
        elif not _is_ours(PPOTrainerConfig, key) and upstream.is_upstream_key(key):
            default = upstream.upstream_default(key, base)
            accepted = s.value == default or (isinstance(default, str) and "${" in default)
            reason = f"{upstream.refusal(key)} (default {default!r})"
            out.append(KeyReport(arg, "default" if accepted else "refused", reason))
        elif not _is_ours(PPOTrainerConfig, key):
            now = next((ours for prefix, ours in OLDER_SPELLINGS if key.startswith(prefix)), None)
            why = "not a key of upstream verl 0.9.1 either (an older spelling"
            out.append(KeyReport(arg, "stale", f"{why}; 0.9.1: {now})" if now else f"{why})"))
        elif key in fields and (fields[key].refused or fields[key].engines):
            info = fields[key]
            reason = info.refused or f"read by the {' / '.join(info.engines)} rollout only"
            status = "default" if s.value == info.default else "refused" if info.refused else "supported"
            out.append(KeyReport(arg, status, f"{reason} (default {info.default!r})"))
        else:
            out.append(KeyReport(arg, "supported", ""))
    return out


def report_command(source: str, argv: list[str]) -> CommandReport:
    # bash expands ``key=~/x`` before Hydra sees it (Hydra's grammar refuses a value starting with ~)
    argv = [re.sub(r"^([^=]*=)~(?=/|$)", r"\1/home/user", a) for a in argv]
    rep = CommandReport(source, argv, classify(argv))
    try:
        cfg = load_config(argv)
        with mock.patch("torch.cuda.is_available", return_value=True):  # validated as on a CUDA machine
            validate_config(cfg)
    except ConfigError as e:
        rep.problems = list(e.problems)
    except FileNotFoundError as e:
        rep.problems = [str(e)]
    return rep


def reports_for(inputs: list[str], env: dict[str, str] | None = None) -> list[CommandReport]:
    if len(inputs) == 1 and inputs[0].endswith(".json"):
        # extracted commands: [{"source": ..., "argv": [...]}, ...] (see docs/upstream-examples/)
        return [report_command(c["source"], c["argv"]) for c in json.loads(Path(inputs[0]).read_text())]
    if inputs and all(Path(p).is_file() and p.endswith(".sh") for p in inputs):
        reps = []
        for p in inputs:
            cmds = commands_from_script(Path(p).read_text(), env)
            if not cmds:
                reps.append(
                    CommandReport(p, [], problems=["no `python3 -m verl.trainer.main_ppo` command found"])
                )
            for i, argv in enumerate(cmds):
                reps.append(report_command(p if len(cmds) == 1 else f"{p} #{i + 1}", argv))
        return reps
    return [report_command("command line", inputs)]


# ------------------------------------------------------------------------------------------- output
def render_text(reps: list[CommandReport]) -> str:
    lines = []
    for rep in reps:
        verdict = (
            "STALE (upstream 0.9.1 refuses it too)" if rep.stale else "LOADS" if rep.loads else "REFUSED"
        )
        lines.append(f"== {rep.source}: {verdict}")
        for k in rep.keys:
            lines.append(f"  [{k.status:9}] {k.arg}" + (f"  -- {k.detail}" if k.detail else ""))
        for p in rep.problems:
            lines.append(f"  problem: {p}")
    lines.append(summary(reps))
    return "\n".join(lines) + "\n"


def summary(reps: list[CommandReport]) -> str:
    current = [r for r in reps if not r.stale]
    n, ok = len(current), sum(r.loads for r in current)
    clean = sum(r.loads and not r.needs for r in current)
    return (
        f"{len(reps)} commands; {len(reps) - n} use keys upstream verl 0.9.1 refuses too (older scripts, "
        f"excluded); of the other {n}: {ok} load ({100 * ok / max(n, 1):.0f}%), {n - ok} refused for a named "
        f"reason; {ok - clean} of those that load name a GPU package not installed here (the needs column)"
    )


def render_markdown(reps: list[CommandReport]) -> str:
    lines = [
        "# Upstream example commands through our config loader",
        "",
        f"**{summary(reps)}**",
        "",
        *([STALE_EVIDENCE] if any(r.stale for r in reps) else []),
        "| script | loads | needs | refused because |",
        "|---|---|---|---|",
    ]
    for r in reps:
        needs = "; ".join(sorted({p.split(INSTALL_MARK + ": ")[-1].split(" (")[0] for p in r.needs}))
        why = "<br>".join(p.replace("|", "/") for p in r.problems if INSTALL_MARK not in p)
        verdict = (
            "stale: upstream 0.9.1 refuses " + ", ".join(f"`{a}`" for a in r.stale)
            if r.stale
            else ("yes" if r.loads else "no")
        )
        lines.append(f"| `{r.source}` | {verdict} | {needs} | {why} |")
    lines += ["", "## Key by key", ""]
    for r in reps:
        lines += [f"### `{r.source}`", "", "| argument | status | why |", "|---|---|---|"]
        for k in r.keys:
            lines.append(f"| `{k.arg.replace('|', '/')}` | {k.status} | {k.detail.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    markdown = "--markdown" in argv
    env = {}
    while argv and argv[0] != "--":
        flag = argv.pop(0)
        if flag == "--env" and argv:
            name, _, value = argv.pop(0).partition("=")
            env[name] = value
        elif flag != "--markdown":
            raise SystemExit(
                f"unknown option {flag!r}; usage: port [--markdown] [--env NAME=VALUE] -- ARGS | FILE.sh ..."
            )
    argv = argv[1:]
    reps = reports_for(argv, env)
    sys.stdout.write(render_markdown(reps) if markdown else render_text(reps))
    return 0 if all(r.loads or r.stale for r in reps) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
